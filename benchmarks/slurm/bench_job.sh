#!/bin/bash
# The body of the robostream benchmark SLURM jobs (bench_1node.sbatch, bench_2node.sbatch): one torchrun per node,
# one process per GPU, results in $OUT/$SLURM_JOB_ID. The sbatch scripts hold only the allocation; settings are the
# environment variables listed there.
set -euo pipefail

# Settings with their defaults.
MODE=${MODE:-single}
LOADER=${LOADER:-stream}
BATCH_SIZE=${BATCH_SIZE:-32}
NUM_WORKERS=${NUM_WORKERS:-2}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-results/slurm}
VENV=${VENV:-.venv}
PYTHON="$VENV/bin/python"

# The dataset source: exactly one of ROOT and REPO_ID.
if [[ -n "${ROOT:-}" && -z "${REPO_ID:-}" ]]; then
    SOURCE=(--root "$ROOT")
elif [[ -n "${REPO_ID:-}" && -z "${ROOT:-}" ]]; then
    SOURCE=(--repo_id "$REPO_ID")
else
    echo "set exactly one of ROOT and REPO_ID (got ROOT='${ROOT:-}' REPO_ID='${REPO_ID:-}')" >&2
    exit 2
fi
[[ -x "$PYTHON" ]] || { echo "no Python at $PYTHON: set VENV to the virtual environment with robostream" >&2; exit 2; }

# Lists become arrays: MODE="single sarm" runs both modes in one job; BENCH_ARGS is split on whitespace.
read -r -a MODES <<< "$MODE"
read -r -a LOADERS <<< "$LOADER"
read -r -a EXTRA <<< "${BENCH_ARGS:-}"

# Processes per node: the GPUs SLURM gave this node, else 1 (a CPU-only run).
NPROC_PER_NODE=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}

# Rendezvous on the first node of the allocation; the port depends on the job id so that jobs sharing a node differ.
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD_NODE=${NODES[0]}
MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}

# Each job writes into its own folder; the settings are kept next to the results.
RUN_OUT="$OUT/$SLURM_JOB_ID"
mkdir -p "$RUN_OUT"
cat > "$RUN_OUT/settings.txt" <<SETTINGS
SOURCE=${SOURCE[*]}
MODE=$MODE
LOADER=$LOADER
BATCH_SIZE=$BATCH_SIZE
NUM_WORKERS=$NUM_WORKERS
DEVICE=$DEVICE
NODES=${NODES[*]}
NPROC_PER_NODE=$NPROC_PER_NODE
BENCH_ARGS=${BENCH_ARGS:-}
SETTINGS

# One torchrun per node (srun starts one task per node). torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and
# LOCAL_WORLD_SIZE for each process; the c10d rendezvous on the head node joins the nodes into one job.
# --kill-on-bad-exit stops the other node when one fails instead of leaving it waiting in a collective;
# --cpu-bind=none with all the node's CPUs leaves the DataLoader workers free to use every core.
srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --cpu-bind=none --kill-on-bad-exit=1 \
    "$PYTHON" -m torch.distributed.run \
        --nnodes="$SLURM_JOB_NUM_NODES" \
        --nproc_per_node="$NPROC_PER_NODE" \
        --rdzv_id="$SLURM_JOB_ID" \
        --rdzv_backend=c10d \
        --rdzv_endpoint="$HEAD_NODE:$MASTER_PORT" \
        -m robostream.bench \
        "${SOURCE[@]}" \
        --mode "${MODES[@]}" \
        --loader "${LOADERS[@]}" \
        --batch_size "$BATCH_SIZE" \
        --num_workers "$NUM_WORKERS" \
        --device "$DEVICE" \
        --out "$RUN_OUT" \
        ${EXTRA[@]+"${EXTRA[@]}"}  # (this form also works with an empty array under set -u in bash < 4.4)
