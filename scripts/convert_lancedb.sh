#!/usr/bin/env bash
# Convert a local LeRobot v3.0 dataset to lerobot-lancedb's Lance layout with its own converter (nothing downloaded),
# for the `lancedb` benchmark peer (robostream/bench/lancedb_peer.py, `robostream bench --peer lancedb
# --peer_root OUT`). Needs .venv-lancedb (scripts/setup_lancedb.sh).
#   scripts/convert_lancedb.sh [SRC] [OUT]   defaults: /work/benchdata/big -> /work/benchdata/big_lance
# which runs:
#   .venv-lancedb/bin/lerobot-lance-convert --root SRC --out OUT
# OUT must be new or a previous conversion of SRC: the converter overwrites its tables but keeps an existing meta/.
# /work/benchdata/big (400 episodes, 80,941 frames, 3 cameras 128x128 AV1, 532 MB) took 21 s on 2 cores, 529 MiB out.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-/work/benchdata/big}
OUT=${2:-/work/benchdata/big_lance}
start=$(date +%s)
.venv-lancedb/bin/lerobot-lance-convert --root "$SRC" --out "$OUT"
took=$(( $(date +%s) - start ))
echo "convert_lancedb: $SRC -> $OUT in $took s, $(du -sh "$OUT" | cut -f1) ($(du -sh "$SRC" | cut -f1) before)"
