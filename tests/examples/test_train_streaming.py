"""examples/train_streaming.py under a real `accelerate launch` with 2 CPU processes (gloo), no mocks.

Run A trains 24 steps straight through (checkpoints at 8, 16, 24). Run B is the same job, SIGKILLed on every rank
while it writes checkpoint 16 (--debug_kill_at_step: a deterministic point between the model/optimizer files and
the commit, the worst moment for a preemption); run C continues B's output_dir with --resume, which must take
checkpoint 8. Each run records every step's batch `index` values per rank, so "exact resume" is checked sample by
sample: B's steps up to 8, then C's steps 9..24, must be A's steps, rank by rank, and C's final weights must equal
A's. An epoch of the fixture is 22 steps per rank, so C resumes mid-epoch 0 and crosses into epoch 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytest.importorskip("accelerate", reason="the training example needs `accelerate` (pip install robostream[train])")
from safetensors.torch import load_file  # noqa: E402  (accelerate depends on safetensors)

from robostream.durable import SCRATCH_MARKER  # noqa: E402
from robostream.format.metadata import load_metadata  # noqa: E402
from tests.examples import processes  # noqa: E402
from tests.helpers import read_records, torchrun_unavailable, tree_listing  # noqa: E402

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "examples" / "train_streaming.py"
STEPS, SAVE_EVERY, KILL_AT = 24, 8, 16
COMMON = [
    "--batch_size",
    "4",
    "--num_workers",
    "1",
    "--steps",
    str(STEPS),
    "--save_every",
    str(SAVE_EVERY),
    "--log_every",
    "8",
    "--seed",
    "1",
    "--pool_size",
    "2",
]
LAUNCH_TIMEOUT_S = 240


def offline_env(home: Path) -> dict[str, str]:
    """No network, no telemetry, no user Accelerate config, one torch thread per process, nothing inherited from
    an outer distributed job."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
        HF_HOME=str(home),
        PYTHONPATH=str(REPO),
    )
    return env


def launch_command(args: list[str]) -> list[str]:
    """2 processes through torchrun's launcher: `accelerate launch --cpu` would start only one (without mpirun),
    so --multi_gpu with ACCELERATE_USE_CPU=true gives 2 CPU ranks on gloo. Skips only when torchrun cannot run a
    trivial gloo job here (otherwise a run that fails is a failure)."""
    reason = torchrun_unavailable()
    if reason is not None:
        pytest.skip(reason)
    return [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        str(SCRIPT),
        *args,
    ]


def launch(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = dict(offline_env(home), ACCELERATE_USE_CPU="true")
    return subprocess.run(launch_command(args), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=env)


def require_two_ranks(name: str, proc: subprocess.CompletedProcess, records: dict[int, list[dict]]) -> None:
    """Fail unless 2 ranks really ran: never pass on one process (accelerate starts them through torchrun's
    launcher, which the session's probe showed works here)."""
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert sorted(records) == [0, 1], f"run {name}: ranks {sorted(records)} recorded samples, expected 0 and 1: {tail}"
    assert all(r["world"] == 2 for lines in records.values() for r in lines), f"run {name}: world size is not 2"


@pytest.fixture(scope="module")
def runs(av1_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("train_streaming")
    root = ["--root", str(av1_root)]
    a = launch([*root, *COMMON, "--output_dir", str(tmp / "a"), "--record_samples", str(tmp / "a.jsonl")], tmp)
    records_a = read_records(tmp / "a.jsonl")
    require_two_ranks("A", a, records_a)
    assert a.returncode == 0, a.stderr[-4000:]

    b = launch(
        [
            *root,
            *COMMON,
            "--output_dir",
            str(tmp / "bc"),
            "--record_samples",
            str(tmp / "b.jsonl"),
            "--debug_kill_at_step",
            str(KILL_AT),
        ],
        tmp,
    )
    records_b = read_records(tmp / "b.jsonl")
    require_two_ranks("B", b, records_b)
    assert b.returncode != 0, "run B should have died from SIGKILL while saving"
    after_kill = {p.name: (p / SCRATCH_MARKER).is_file() for p in sorted((tmp / "bc").iterdir())}

    c = launch(
        [*root, *COMMON, "--output_dir", str(tmp / "bc"), "--record_samples", str(tmp / "c.jsonl"), "--resume"], tmp
    )
    records_c = read_records(tmp / "c.jsonl")
    require_two_ranks("C", c, records_c)
    assert c.returncode == 0, c.stderr[-4000:]
    return {"tmp": tmp, "a": records_a, "b": records_b, "c": records_c, "after_kill": after_kill, "c_out": c.stdout}


def test_the_kill_mid_save_leaves_the_previous_checkpoint(runs):
    """What the kill left: checkpoint 8 and the killed save's scratch folder, marked as the example's (the resumed
    run removes it: test_checkpoints_exist_and_resumed_weights_match)."""
    (scratch, marked), kept = runs["after_kill"].items()
    assert scratch.startswith(f".tmp-checkpoint-{KILL_AT}-") and marked, runs["after_kill"]
    assert kept == ("checkpoint-8", False), runs["after_kill"]
    assert all(lines[-1]["step"] == KILL_AT for lines in runs["b"].values()), "B did not reach the kill step"
    assert f"resumed from {runs['tmp'] / 'bc' / 'checkpoint-8'} at step 8" in runs["c_out"], runs["c_out"][-2000:]


def test_killed_and_resumed_run_sees_exactly_the_uninterrupted_samples(runs):
    for rank in (0, 1):
        a, b, c = runs["a"][rank], runs["b"][rank], runs["c"][rank]
        assert [r["step"] for r in a] == list(range(1, STEPS + 1))
        assert [r["step"] for r in c] == list(range(SAVE_EVERY + 1, STEPS + 1)), "C did not resume after step 8"
        resumed = [r for r in b if r["step"] <= SAVE_EVERY] + c
        assert resumed == a, f"rank {rank}: the resumed run's samples differ from the uninterrupted run's"
        assert {r["epoch"] for r in c} == {0, 1}, "the resumed run should cross into epoch 1"


def test_the_two_ranks_split_the_epoch(runs, av1_root):
    """Epoch 0 of run A: the ranks' samples are disjoint and together every frame (uneven="pad" repeats a rank's
    own samples, never the other rank's)."""
    frames = int(load_metadata(av1_root).episodes.length.sum())
    per_rank = [{i for r in runs["a"][rank] if r["epoch"] == 0 for i in r["index"]} for rank in (0, 1)]
    assert not per_rank[0] & per_rank[1], "the ranks read the same samples"
    assert len(per_rank[0] | per_rank[1]) == frames


def test_checkpoints_exist_and_resumed_weights_match(runs):
    a_dir, bc_dir = runs["tmp"] / "a", runs["tmp"] / "bc"
    assert sorted(p.name for p in a_dir.iterdir()) == ["checkpoint-16", "checkpoint-24", "checkpoint-8"]
    assert sorted(p.name for p in bc_dir.iterdir()) == ["checkpoint-16", "checkpoint-24", "checkpoint-8"]
    final = bc_dir / "checkpoint-24"
    for name in ("model.safetensors", "optimizer.bin", "random_states_0.pkl", "random_states_1.pkl"):
        assert (final / name).is_file(), name
    state = json.loads((final / "trainer_state.json").read_text())
    assert (state["step"], state["epoch"], state["world_size"]) == (STEPS, 1, 2)
    a_weights = load_file(a_dir / "checkpoint-24" / "model.safetensors")
    c_weights = load_file(final / "model.safetensors")
    assert a_weights.keys() == c_weights.keys()
    for key in a_weights:  # same data, same optimizer state, deterministic CPU kernels: identical training
        assert a_weights[key].equal(c_weights[key]), key


def test_a_save_keeps_what_it_did_not_make_and_replaces_a_linked_step_folder(av1_root, tmp_path):
    """One process (no launcher) saves steps 1 and 2; the user keeps notes in `.tmp-checkpoint-1/`, leaves a file
    `.tmp-checkpoint-x`, and moves checkpoint 1 to another disk behind a symlink; the job is then rerun from scratch
    into the same folder. The notes, the file and the moved checkpoint stay as they were, `checkpoint-1` becomes the
    new checkpoint (the link replaced, not followed: rmtree used to crash on it) and a warning names what was left
    alone (the notes used to be deleted)."""
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--root",
        str(av1_root),
        "--steps",
        "2",
        "--save_every",
        "1",
        "--batch_size",
        "4",
        "--num_workers",
        "0",
        "--output_dir",
        str(out),
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=offline_env(tmp_path))
    assert first.returncode == 0, first.stderr[-4000:]
    (out / ".tmp-checkpoint-1").mkdir()
    (out / ".tmp-checkpoint-1" / "notes.txt").write_text("lr 3e-4 diverged")
    (out / ".tmp-checkpoint-x").write_text("a file")
    moved = tmp_path / "other-disk" / "checkpoint-1"
    moved.parent.mkdir()
    (out / "checkpoint-1").rename(moved)
    (out / "checkpoint-1").symlink_to(moved)
    kept = tree_listing(moved)

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=offline_env(tmp_path))

    assert again.returncode == 0, again.stderr[-4000:]
    assert tree_listing(out / ".tmp-checkpoint-1") == {"notes.txt": b"lr 3e-4 diverged"}
    assert (out / ".tmp-checkpoint-x").read_text() == "a file"
    assert tree_listing(moved) == kept
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-1").is_symlink()
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["step"] == 1
    assert sorted(p.name for p in out.iterdir()) == [
        ".tmp-checkpoint-1",
        ".tmp-checkpoint-x",
        "checkpoint-1",
        "checkpoint-2",
    ]
    assert (
        "['.tmp-checkpoint-1', '.tmp-checkpoint-x'] look like the scratch folders of examples/train_streaming.py"
        in again.stderr
    ), again.stderr[-4000:]


def test_dummy_run_reports_throughput(av1_root, tmp_path):
    """The data path alone, one process without a launcher."""
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--root",
        str(av1_root),
        "--dummy",
        "--steps",
        "20",
        "--batch_size",
        "8",
        "--num_workers",
        "1",
        "--log_every",
        "10",
        "--output_dir",
        str(tmp_path / "unused"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=offline_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = [line for line in proc.stdout.splitlines() if line.startswith("done:")]
    assert done and "samples/s" in done[0] and "frames/s" in done[0] and "data-wait fraction" in done[0], proc.stdout
    assert "160 samples per rank" in done[0]
    assert not (tmp_path / "unused").exists(), "a --dummy run writes no checkpoint"


def wait_for(condition, what: str, proc: subprocess.Popen):
    return processes.wait_for(condition, what, proc, LAUNCH_TIMEOUT_S)


def test_sigusr1_to_one_rank_stops_every_rank_after_the_same_step_with_a_checkpoint(av1_root, tmp_path):
    """SIGUSR1 reaches only rank 1 (as when a signal races a multi-node job); both ranks must stop after the same
    step, write one checkpoint of it between the periodic ones, and exit 0."""
    out, record = tmp_path / "out", tmp_path / "s.jsonl"
    args = [
        "--root",
        str(av1_root),
        *COMMON,
        "--steps",
        "100000",
        "--save_every",
        "100000",
        "--output_dir",
        str(out),
        "--record_samples",
        str(record),
    ]  # later flags win: no periodic checkpoint, no natural end
    proc = subprocess.Popen(
        launch_command(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(offline_env(tmp_path), ACCELERATE_USE_CPU="true"),
    )
    try:
        # Both ranks are past startup (handler installed) once each has recorded a step.
        wait_for(
            lambda: len(read_records(record)) == 2 and all(read_records(record).values()),
            "both ranks recorded a step",
            proc,
        )
        # the launcher's own children are the ranks (their loader workers inherit RANK too)
        rank1 = [p for p in psutil.Process(proc.pid).children() if p.environ().get("RANK") == "1"]
        assert len(rank1) == 1, f"expected one rank-1 process, found {rank1}"
        rank1[0].send_signal(signal.SIGUSR1)
        stdout, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-4000:]
    records = read_records(record)
    last = {rank: lines[-1]["step"] for rank, lines in records.items()}
    assert last[0] == last[1], f"the ranks stopped after different steps: {last}"
    step = last[0]
    assert f"stopping after step {step} on SIGUSR1" in stdout, stdout[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [f"checkpoint-{step}"]
    state = json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())
    assert (state["step"], state["world_size"]) == (step, 2)
