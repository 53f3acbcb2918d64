#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on both supported torch/torchcodec pairs:
#   1. .venv (our pins: torch 2.13 + torchcodec 0.13): every test; the lerobot parity tests run against
#      .venv-lerobot once it is built;
#   2. .venv-lerobot (lerobot 0.6.1's pair: torch 2.11 + torchcodec 0.11, robostream installed into it): the tests
#      whose subject depends on the pair: video decoding, datasets and loaders (DataLoader workers, shared memory,
#      torch.distributed), batch assembly, the training example's loop, the batched augmentations (compared with
#      lerobot's torchvision transforms, which only this environment has).
# Wall time (CI: <= 20 minutes on 2 cores). Two streams run side by side, because most tests keep one core busy
# (a pytest process, or a lerobot interpreter) and the machine has two:
#   foreground: ruff, then our pair's tests that need no lerobot, then (once lerobot's environment is built) the
#     benchmark's lerobot peer;
#   background: mypy, then (once lerobot's environment is built: a download that needs nothing of ours, started
#     first) the training command's tests (`robostream train` runs in lerobot's environment) and the compat tests
#     (lerobot reads what we read and write), then the second pair's tests; its output is printed when it ends.
# Measured with both environments built, quiet 2 cores (2026-11-27, seventh session): 16:30 in all, green (foreground
# 16:30: our pair 15:23, the peer 1:02; background 15:59: mypy (warm) and lerobot ready 0:09, the training command's
# tests, compat and the peer's Hub test 11:58, second pair 3:47). It was 20:57 (CI: 24:38). What changed: every
# `robostream` command imported torch to build its parser (the benchmark's arguments: ~3 s of every launch of the
# converter's CLI in the tests); the training tests started a kept lerobot interpreter per test (its key held pytest's
# PYTEST_CURRENT_TEST), each parse rebuilt draccus's help text, and four reference runs were fresh launches.
# The second pair leaves out what does not depend on the pair (pure planning, format, writers, converter, storage and
# remote reads, the datasets' argument and resume-state checks, packaging, the benchmark's CLI and peers, the CLIs'
# argument and report tests, the SLURM launcher's shell tests and the training example's kill/resume cases: all run
# by the first pair), two elastic layouts of three and two of the mixture's three torchrun runs (torch.distributed on
# the pair is proven by the others); the first pair leaves out the one layout and the one mixture run the second
# pair runs.
# Arguments go to pytest in every run.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
lerobot_log=$scratch/lerobot-setup.log
lerobot_rc=$scratch/lerobot-setup.rc
venv_ready=$scratch/venv.ready
main_shell=$$
# Prints a line prefixed with the time since the start (the phases' durations show in CI's log).
say() { printf '[%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# Waits for a file a stream writes when it is done (while this script runs: a background job never outlives it).
wait_for() {
  while [ ! -f "$1" ]; do
    kill -0 "$main_shell" 2>/dev/null || exit 1
    sleep 2
  done
}
# lerobot's environment: its download first (needs nothing of ours), then robostream into it (reads .venv's pins).
(
  set +e
  bash scripts/setup_lerobot.sh --lerobot-only
  rc=$?
  if [ "$rc" = 0 ]; then
    wait_for "$venv_ready"
    bash scripts/setup_lerobot.sh
    rc=$?
  fi
  say "lerobot's environment built (exit $rc)"
  echo "$rc" >"$lerobot_rc"
) >"$lerobot_log" 2>&1 &
bash scripts/setup.sh
touch "$venv_ready"
say "set-up: .venv ready"

# Waits until lerobot's environment is built; fails (printing its log) if building it failed.
lerobot_ready() {
  wait_for "$lerobot_rc"
  if [ "$(cat "$lerobot_rc")" != 0 ]; then
    cat "$lerobot_log"
    say "test: building lerobot's environment failed (above)" >&2
    return 1
  fi
}
export ROBOSTREAM_LEROBOT_PYTHON="$PWD/.venv-lerobot/bin/python"
# The tests that need lerobot's environment: the training command's and the compat tests (background) and the
# benchmark's lerobot peer (foreground, after our pair's other tests: they balance the two streams).
training=(tests/lerobot_train tests/compat)
after_lerobot=(tests/bench/test_lerobot_peer.py)
# The peer's longest test (~1 min: lerobot streams from the Hub emulator) runs in the background, after the training
# command's (they balance the two streams).
hub_peer=tests/bench/test_lerobot_peer.py::test_the_streaming_peer_reads_the_hub_store

say "lint: ruff check + ruff format --check (pyproject.toml [tool.ruff])"
.venv/bin/python -m ruff check robostream tests benchmarks examples scripts
.venv/bin/python -m ruff format --check robostream tests benchmarks examples scripts

background_log=$scratch/background.log
(
  set -e
  say "types: mypy over robostream/ (pyproject.toml [tool.mypy])"
  .venv/bin/python -m mypy
  lerobot_ready
  cat "$lerobot_log"
  say "test: our pair (.venv), the training command and the compat tests in lerobot's environment ($ROBOSTREAM_LEROBOT_PYTHON)"
  .venv/bin/python -m pytest "$@" "${training[@]}" "$hub_peer"
  say "test: lerobot 0.6.1's pair (.venv-lerobot)"
  .venv-lerobot/bin/python -m pytest "$@" tests/video tests/datasets tests/augment \
    tests/examples/test_train_streaming.py::test_dummy_run_reports_throughput \
    --ignore=tests/datasets/test_resume_state.py --ignore=tests/datasets/test_options.py \
    --ignore=tests/datasets/test_bad_numbers.py --ignore=tests/datasets/test_sources_file.py \
    --deselect "tests/datasets/test_distributed.py::test_elastic_resume_on_any_layout[4to5]" \
    --deselect "tests/datasets/test_distributed.py::test_elastic_resume_on_any_layout[12to7]" \
    --deselect "tests/datasets/test_mixture.py::test_elastic_resume_of_a_mixture_from_2x2_to_1x3_undertorchrun_part[per_stream]" \
    --deselect "tests/datasets/test_mixture.py::test_elastic_resume_of_a_mixture_from_2x2_to_1x3_undertorchrun_part[stratified]"
  say "background stream done"
) >"$background_log" 2>&1 &
background=$!

status=0
say "test: our pair (.venv), the tests that need no lerobot (mypy and the lerobot tests run beside them)"
# The elastic layout and the mixture's torchrun run that lerobot's pair runs (above) are left to it: each runs once,
# torch.distributed is proven on both pairs, and this stream (the longer one) is ~50 s shorter.
.venv/bin/python -m pytest "$@" $(printf -- '--ignore=%s ' "${training[@]}" "${after_lerobot[@]}") \
  --deselect "tests/datasets/test_distributed.py::test_elastic_resume_on_any_layout[4to3]" \
  --deselect "tests/datasets/test_mixture.py::test_elastic_resume_of_a_mixture_from_2x2_to_1x3_undertorchrun_part[random]" \
  || status=$?
if [ "$status" = 0 ]; then
  lerobot_ready || status=$?
fi
if [ "$status" = 0 ]; then
  say "test: our pair (.venv), the benchmark's lerobot peer against $ROBOSTREAM_LEROBOT_PYTHON"
  .venv/bin/python -m pytest "$@" "${after_lerobot[@]}" --deselect "$hub_peer" || status=$?
fi

say "foreground stream done"
background_status=0
wait "$background" || background_status=$?
say "---- the background stream: mypy, the training command's tests and lerobot's pair (run beside the above) ----"
cat "$background_log"
if [ "$background_status" != 0 ]; then
  say "test: the background stream failed (above)" >&2
fi
say "done"
rm -rf "$scratch"
[ "$status" = 0 ] && [ "$background_status" = 0 ]
