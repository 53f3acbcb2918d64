#!/usr/bin/env bash
# The environment of the `lancedb` benchmark peer (robostream/bench/lancedb_peer.py): .venv-lancedb, Python 3.12,
# lerobot-lancedb 0.3.1 (its LanceDBDataset and its converter `lerobot-lance-convert`) with what it requires:
# lerobot[dataset] 0.6.1 (metadata, samplers, and the torch + torchcodec pair its reader decodes with), lancedb
# (blob v2 columns, `fetch_blob_ranges`) and PyAV. torch, torchcodec and lerobot are pinned to the versions
# .venv-lerobot resolves (scripts/setup_lerobot.sh), so both peers decode with the same libraries.
# torch comes from PyPI: PyPI's Linux wheels are the CUDA build (its nvidia-* libraries, ~3 GB), the only one this
# project's machines can install (CPU-only wheels are not on PyPI); it runs on a CPU as is.
# robostream itself is NOT installed here: the peer's factory and probe.py import only the standard library, numpy,
# torch, psutil and the peer's packages.
# Safe to run again: it only installs what is missing.
#
# Then convert a dataset with lerobot-lancedb's own converter (a local LeRobot v3.0 folder, nothing downloaded), e.g.
# the benchmark's (scripts/convert_lancedb.sh does this):
#   .venv-lancedb/bin/lerobot-lance-convert --root /work/benchdata/big --out /work/benchdata/big_lance
# and run the peer:
#   .venv/bin/python -m robostream bench /work/benchdata/big --peer lancedb --peer_python .venv-lancedb/bin/python \
#       --peer_root /work/benchdata/big_lance ...
set -euo pipefail
cd "$(dirname "$0")/.."
LEROBOT_LANCEDB_VERSION=0.3.1
LANCEDB_VERSION=0.40.0
LEROBOT_VERSION=0.6.1
TORCH_VERSION=2.11.0
TORCHCODEC_VERSION=0.11.1
VENV=.venv-lancedb

find_python312() {
  if command -v python3.12 >/dev/null 2>&1 && python3.12 -c "" 2>/dev/null; then
    command -v python3.12
    return
  fi
  # pyenv installs a 3.12 that its shims only expose when selected: look for it directly.
  local candidate
  for candidate in "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
  echo "setup_lancedb: no Python 3.12 found (lerobot $LEROBOT_VERSION needs it): install it, e.g. pyenv install 3.12" >&2
  exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
  "$(find_python312)" -m venv "$VENV"
fi
stamp="$VENV/.lancedb-installed"
want=$(sha256sum scripts/setup_lancedb.sh | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup_lancedb: installing lerobot-lancedb==$LEROBOT_LANCEDB_VERSION into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "lerobot-lancedb==$LEROBOT_LANCEDB_VERSION" "lancedb==$LANCEDB_VERSION" \
    "lerobot[dataset]==$LEROBOT_VERSION" "torch==$TORCH_VERSION" "torchcodec==$TORCHCODEC_VERSION" psutil
  "$VENV/bin/python" -m pip freeze > "$VENV/lancedb-pins.txt"
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" -c "
import importlib.metadata as m, lerobot_lancedb, torch, torchcodec.decoders
print('setup_lancedb: lerobot-lancedb', m.version('lerobot-lancedb'), '| lancedb', m.version('lancedb'),
      '| lerobot', m.version('lerobot'), '| torch', torch.__version__, '| torchcodec', torchcodec.__version__)"
