#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on both supported torch/torchcodec pairs:
#   1. .venv (our pins: torch 2.13 + torchcodec 0.13), with the lerobot parity tests run against .venv-lerobot;
#   2. .venv-lerobot (lerobot 0.6.1's pair: torch 2.11 + torchcodec 0.11, robostream installed into it): every test
#      whose subject depends on the pair (datasets, loaders, video decoding, batches, benchmark, examples, plans,
#      format); left out to keep CI near 20 minutes: the converter, storage/remote-read and packaging tests, the
#      CLIs' argument/progress/report/gather tests and the SLURM launcher's shell tests (their subject is not the
#      torch pair; all of them passed there when this was set up), and the parity tests step 1 ran against that
#      interpreter. The benchmark's loaders still run there (its mixture test), as do the training example's.
# Arguments go to pytest in both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_lerobot.sh
export ROBOSTREAM_LEROBOT_PYTHON="$PWD/.venv-lerobot/bin/python"
echo "test: our pair (.venv), lerobot parity against $ROBOSTREAM_LEROBOT_PYTHON"
.venv/bin/python -m pytest "$@"
echo "test: lerobot 0.6.1's pair (.venv-lerobot)"
exec .venv-lerobot/bin/python -m pytest "$@" --ignore=tests/compat --ignore=tests/convert --ignore=tests/storage \
  --ignore=tests/remote --ignore=tests/test_packaging.py --ignore=tests/test_cli.py \
  --ignore=tests/examples/test_slurm_train.py --deselect tests/bench/test_lerobot_peer.py \
  --deselect tests/examples/test_train_lerobot_policy.py \
  $(printf -- '--deselect tests/bench/test_bench_cli.py::%s ' test_every_run_writes_its_figures \
    test_csv_holds_one_row_per_run test_report_renders_table_and_plots test_bad_arguments_fail_clearly \
    test_torchrun_gathers_both_ranks)
