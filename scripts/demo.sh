#!/usr/bin/env bash
# The main job: set up (if needed), generate the embedded sample dataset and benchmark reading it.
# Environment knobs: EPISODES (default 40), OUT (default out/sample).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${OUT:-out/sample}
if [ ! -f "$OUT/meta/info.json" ]; then
  .venv/bin/robostream synth "$OUT" --episodes "${EPISODES:-40}" --overwrite
fi
.venv/bin/robostream inspect "$OUT"
.venv/bin/robostream bench "$OUT" --mode single sarm --batch-size 32 --num-workers 2 --json-out out/bench.json
