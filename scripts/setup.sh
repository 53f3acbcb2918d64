#!/usr/bin/env bash
# Set up robostream on a fresh machine (Python >= 3.11, pip, apt): FFmpeg shared libraries for torchcodec from the
# system packages, and a virtual environment in .venv with the pinned torch/torchcodec pair and the test tools.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! ldconfig -p 2>/dev/null | grep -q 'libavdevice\.so\.[0-9]'; then
  echo "setup: installing the system FFmpeg libraries torchcodec loads"
  sudo_if_needed apt-get update -q
  # Library package names carry the soname (libavcodec59 on Debian 12); look them up instead of hard-coding.
  pkgs=$(apt-cache search --names-only '^(libavdevice|libavfilter|libavformat|libavcodec|libavutil|libswscale|libswresample)[0-9]+$' \
         | awk '{print $1}' | grep -E '^lib(av|sw)[a-z]+[0-9]+$' | sort -V \
         | awk -F'[0-9]' '{last[$1]=$0} END {for (b in last) print last[b]}')
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.robostream-installed
want=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # pip byte-compiles what it installs (minutes of a core): keep it. Machines here set PYTHONDONTWRITEBYTECODE=1,
  # so a module left uncompiled would be compiled again at every import, in every test interpreter.
  .venv/bin/python -m pip install -q -c scripts/constraints.txt -e ".[test,s3,distributed]"
  echo "$want" > "$stamp"
fi
.venv/bin/python -c "import torch, torchcodec.decoders, av; print('setup: torch', torch.__version__, '| torchcodec', torchcodec.__version__, '| PyAV', av.__version__)"
