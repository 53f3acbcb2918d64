#!/bin/bash
# One node of examples/slurm/train.sbatch (srun runs it once per node): torchrun with NPROC_PER_NODE processes of
# examples/train_streaming.py, joining the other nodes through a c10d rendezvous at RDZV_ENDPOINT. The arguments
# are train_streaming.py's. USR1 (the job's warning, forwarded by srun) reaches the training processes, which
# checkpoint after the current step and exit 0; torchrun itself ignores it (its default action would kill it).
set -euo pipefail
for name in PYTHON NNODES NPROC_PER_NODE RDZV_ENDPOINT SLURM_NODEID SLURM_JOB_ID; do
    [[ -n "${!name:-}" ]] || { echo "train_node.sh: $name is not set (srun runs this from train.sbatch)" >&2; exit 2; }
done

# The rank of this node in the job: with the c10d backend the rendezvous assigns node ranks itself, --node_rank
# keeps the SLURM order for the static backend and in torchrun's logs.
(trap '' USR1; exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$SLURM_NODEID" \
    --nproc_per_node="$NPROC_PER_NODE" \
    --rdzv_id="$SLURM_JOB_ID" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$RDZV_ENDPOINT" \
    examples/train_streaming.py "$@") &
torchrun=$!

# torchrun starts each worker in a session of its own, so signalling this task's process group misses them:
# pass USR1 to torchrun's children (the training processes) by parent pid.
trap 'pkill -USR1 -P "$torchrun" || true' USR1
while true; do
    status=0
    wait "$torchrun" || status=$?
    kill -0 "$torchrun" 2>/dev/null || break  # still running: a trapped USR1 cut the wait short
done
exit "$status"
