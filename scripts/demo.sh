#!/usr/bin/env bash
# The main job: set up (if needed), generate the embedded sample dataset and benchmark reading it.
# Environment knobs: EPISODES (default 40), OUT (default out/sample), BENCH_OUT (default out/bench),
# PEER_PYTHON (an interpreter with lerobot installed: adds lerobot's own loader side by side).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${OUT:-out/sample}
BENCH_OUT=${BENCH_OUT:-out/bench}
if [ ! -f "$OUT/meta/info.json" ]; then
  .venv/bin/robostream synth "$OUT" --episodes "${EPISODES:-40}" --overwrite
fi
.venv/bin/robostream inspect "$OUT"
peer=()
if [ -n "${PEER_PYTHON:-}" ]; then
  peer=(--peer lerobot --peer_python "$PEER_PYTHON")
fi
rm -rf "$BENCH_OUT"  # bench-report renders every result in the folder: start from this run's only
.venv/bin/robostream bench "$OUT" --mode single sarm --loader stream map "${peer[@]}" --batch_size 32 \
  --num_workers 2 --num_batches 40 --reference decode --out "$BENCH_OUT"
.venv/bin/robostream bench-report "$BENCH_OUT"
