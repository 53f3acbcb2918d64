#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on both supported torch/torchcodec pairs:
#   1. .venv (our pins: torch 2.13 + torchcodec 0.13): every test; the lerobot parity tests run against
#      .venv-lerobot once it is built;
#   2. .venv-lerobot (lerobot 0.6.1's pair: torch 2.11 + torchcodec 0.11, robostream installed into it): the tests
#      whose subject depends on the pair: video decoding, datasets and loaders (DataLoader workers, shared memory,
#      torch.distributed), batch assembly, the benchmark's loaders, the training example, the batched augmentations
#      (compared with lerobot's torchvision transforms, which only this environment has).
# Wall time (CI: ~20 minutes on 2 cores): lerobot's environment is a download of several minutes that needs nothing
# of ours, so it is built in the background while .venv is set up and the tests that do not need it run; the
# second pair leaves out what does not depend on the pair (pure planning, format, writers, converter, storage and
# remote reads, packaging, the CLIs' argument and report tests, the SLURM launcher's shell tests: all torch-free or
# pinned by step 1) and runs one of the three elastic torchrun layouts (step 1 runs all three).
# Arguments go to pytest in every run.
set -euo pipefail
cd "$(dirname "$0")/.."
lerobot_log=$(mktemp)
bash scripts/setup_lerobot.sh --lerobot-only >"$lerobot_log" 2>&1 &
lerobot_setup=$!
bash scripts/setup.sh
echo "lint: ruff check + ruff format --check (pyproject.toml [tool.ruff])"
.venv/bin/python -m ruff check robostream tests benchmarks examples scripts
.venv/bin/python -m ruff format --check robostream tests benchmarks examples scripts
echo "types: mypy over robostream/ (pyproject.toml [tool.mypy])"
.venv/bin/python -m mypy

needs_lerobot=(tests/compat tests/bench/test_lerobot_peer.py tests/lerobot_train)
echo "test: our pair (.venv), the tests that need no lerobot (its environment builds meanwhile)"
.venv/bin/python -m pytest "$@" $(printf -- '--ignore=%s ' "${needs_lerobot[@]}")

if ! wait "$lerobot_setup"; then
  cat "$lerobot_log"
  echo "test: building lerobot's environment failed (above)" >&2
  exit 1
fi
cat "$lerobot_log"
bash scripts/setup_lerobot.sh
export ROBOSTREAM_LEROBOT_PYTHON="$PWD/.venv-lerobot/bin/python"
echo "test: our pair (.venv), lerobot parity against $ROBOSTREAM_LEROBOT_PYTHON"
.venv/bin/python -m pytest "$@" "${needs_lerobot[@]}"

echo "test: lerobot 0.6.1's pair (.venv-lerobot)"
exec .venv-lerobot/bin/python -m pytest "$@" tests/video tests/datasets tests/bench tests/examples tests/augment \
  --ignore=tests/bench/test_lerobot_peer.py \
  --ignore=tests/examples/test_slurm_train.py \
  --deselect "tests/datasets/test_distributed.py::test_elastic_resume_on_any_layout[4to5]" \
  --deselect "tests/datasets/test_distributed.py::test_elastic_resume_on_any_layout[12to7]" \
  $(printf -- '--deselect tests/bench/test_bench_cli.py::%s ' test_every_run_writes_its_figures \
    test_csv_holds_one_row_per_run test_report_renders_table_and_plots test_bad_arguments_fail_clearly \
    test_torchrun_gathers_both_ranks)
