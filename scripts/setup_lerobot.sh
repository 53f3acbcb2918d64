#!/usr/bin/env bash
# The lerobot environment the parity tests run in: .venv-lerobot, Python 3.12, lerobot 0.6.1 (with its diffusion
# extra: `robostream train` is tested on ACT and Diffusion Policy) with the torch and torchcodec pair it resolves
# (torch 2.11 + torchcodec 0.11), and robostream installed into it the way a lerobot user would (with its `train`
# extra: accelerate) and lerobot's transformers-dep extra (the reward classifier's encoder), constrained so that none
# of lerobot's packages move. Run by scripts/test.sh after scripts/setup.sh.
# `--lerobot-only` installs lerobot alone (the long download, which needs nothing of .venv): scripts/test.sh runs it
# beside scripts/setup.sh and the first tests, then this script again for the rest.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
LEROBOT_VERSION=0.6.1
VENV=.venv-lerobot

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
  echo "setup_lerobot: no Python 3.12 found (lerobot $LEROBOT_VERSION needs it): install it, e.g. pyenv install 3.12" >&2
  exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
  "$(find_python312)" -m venv "$VENV"
fi
pins="$VENV/lerobot-pins.txt"
if [ ! -f "$pins" ]; then
  echo "setup_lerobot: installing lerobot[dataset,diffusion]==$LEROBOT_VERSION into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Byte-compiled at install (PYTHONDONTWRITEBYTECODE=1 here: nothing would be compiled later, once per import).
  "$VENV/bin/python" -m pip install -q "lerobot[dataset,diffusion]==$LEROBOT_VERSION" psutil
  "$VENV/bin/python" -m pip freeze --exclude-editable > "$pins.tmp"
  mv "$pins.tmp" "$pins"
fi
if [ "${1:-}" = "--lerobot-only" ]; then
  exit 0
fi
stamp="$VENV/.robostream-installed"
want=$(cat pyproject.toml scripts/setup_lerobot.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # Constraints: lerobot's packages that matter to it stay exactly as lerobot resolved them (torch/torchcodec pair
  # first); s3fs at the release of its fsspec (each s3fs pins one fsspec); the AWS test stack at the versions our
  # own .venv resolved, so pip has nothing to search (unpinned, it backtracks through botocore releases for long).
  kept='torch|torchvision|torchcodec|lerobot|datasets|fsspec|huggingface-hub|numpy|av|opencv-python-headless|pyarrow|pandas|pillow'
  fsspec=$(grep -iE '^fsspec==' "$pins" | sed -E 's/^[^=]*==//')
  constraints="$VENV/constraints.txt"
  {
    awk -F'==' -v kept="^($kept)\$" '{name=tolower($1); gsub("_", "-", name); if (name ~ kept) print}' "$pins"
    echo "s3fs==$fsspec"
    .venv/bin/python -m pip freeze --exclude-editable | grep -iE '^(boto3|botocore|aiobotocore|s3transfer|moto)=='
  } > "$constraints"
  "$VENV/bin/python" -m pip install -q -c "$constraints" -e ".[test,s3,train]"
  # lerobot's `pusht` extra (its pins) for `robostream train --env.type=pusht` (tests/lerobot_train/test_env_eval.py);
  # gym-pusht without its opencv-python: lerobot's opencv-python-headless gives it cv2 (both wheels write cv2/)
  "$VENV/bin/python" -m pip install -q --no-deps "gym-pusht>=0.1.5,<0.2.0"
  "$VENV/bin/python" -m pip install -q -c "$constraints" "pymunk>=6.6.0,<7.0.0" "pygame>=2.5.2,<2.7.0" "shapely>=2.0.3,<3.0.0"
  # lerobot's transformers-dep extra (its own range for transformers, lerobot's packages held by the constraints):
  # the reward classifier's encoder (AutoModel) for `robostream train --reward_model.type=reward_classifier`
  # (tests/lerobot_train/test_reward_model.py); adds transformers, tokenizers, typer (~110 MB of .venv-lerobot)
  "$VENV/bin/python" -m pip install -q -c "$constraints" "lerobot[transformers-dep]==$LEROBOT_VERSION"
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" -c "import lerobot, torch, torchcodec; print('setup_lerobot: lerobot', lerobot.__version__, '| torch', torch.__version__, '| torchcodec', torchcodec.__version__)"
