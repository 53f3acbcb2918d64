"""The `robostream train` tests' datasets, and the runs that several tests assert on (each launch of the command is
~10 s of importing lerobot before it trains: a run that can show several behaviours is launched once)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from robostream.synth import generate
from robostream.testing.slow_store import RangeHTTPServer
from tests.lerobot_train.harness import (
    ACT,
    COMMON,
    EIGHT,
    EVAL,
    SCRIPTS,
    SIX,
    TINY,
    TINY2,
    act_args,
    resume,
    train,
    train_until_killed,
    write_progress,
)


@pytest.fixture(scope="session")
def tiny_root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 episodes of 12 frames (49 in all), 2 cameras 64x64."""
    return generate(tmp_path_factory.mktemp("tiny") / "ds", TINY)


@pytest.fixture(scope="session")
def tiny2_root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes of 10 frames, 2 cameras 64x64."""
    return generate(tmp_path_factory.mktemp("tiny2") / "ds", TINY2)


@pytest.fixture(scope="session")
def eight(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 episodes (the eval split holds out HELD_OUT_EIGHT), with RA-BC's progress file."""
    root = generate(tmp_path_factory.mktemp("eight") / "ds", EIGHT, jobs=1)
    write_progress(root)
    return root


@pytest.fixture(scope="session")
def six(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 episodes (the eval split holds out HELD_OUT_SIX), with RA-BC's progress file."""
    root = generate(tmp_path_factory.mktemp("six") / "ds", SIX, jobs=1)
    write_progress(root)
    return root


@dataclass(frozen=True)
class TwoProcessRuns:
    """Where the torchrun runs are (a/, b/, c/ and their records) and run A's log."""

    path: Path
    log_a: str


@pytest.fixture(scope="session")
def two_process_runs(
    lerobot_python: str, hf_home: Path, tiny_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> TwoProcessRuns:
    """Streaming ACT on 2 torchrun (gloo) processes, 8 steps: A straight, asked for FSDP (ACCELERATE_USE_FSDP, as
    `accelerate launch --use_fsdp` sets it; on CPU accelerate trains unsharded and robostream warns); B plain,
    killed after step 5 and resumed on 2 processes: B's steps and weights are A's bit for bit, so FSDP asked for
    on CPU trains exactly as unsharded. B's checkpoint 4 as it was before B resumed (B overwrites `last`) is
    copied to c/ for a resume on ONE process. Forked workers (lerobot's default, spawn, is trained by the language
    test): 3 runs x 2 ranks start workers."""
    tmp = tmp_path_factory.mktemp("two_processes")
    args = [
        "--dataset.streaming=true",
        "--batch_size=4",
        "--num_workers=1",
        "--dataloader_multiprocessing_context=fork",
    ]
    log_a = train(
        lerobot_python,
        hf_home,
        act_args(tiny_root, tmp / "a", tmp / "a.jsonl", 8, *args),
        processes=2,
        env={"ACCELERATE_USE_FSDP": "true"},
    )
    train_until_killed(
        lerobot_python,
        hf_home,
        act_args(tiny_root, tmp / "b", tmp / "b.jsonl", 8, *args),
        record=tmp / "b.jsonl",
        after_steps=5,
        processes=2,
    )
    shutil.copytree(tmp / "b" / "checkpoints" / "000004", tmp / "c" / "checkpoints" / "000004")
    os.symlink("000004", tmp / "c" / "checkpoints" / "last")
    train(lerobot_python, hf_home, resume(tmp / "b"), processes=2)
    return TwoProcessRuns(path=tmp, log_a=log_a)


@dataclass(frozen=True)
class WeightedEvalMixture:
    """The run's output folder (its record beside it: `<out>.jsonl`) and the resumed launch's log."""

    out: Path
    resumed_log: str


@pytest.fixture(scope="session")
def weighted_eval_mixture(
    lerobot_python: str, hf_home: Path, eight: Path, six: Path, tmp_path_factory: pytest.TempPathFactory
) -> WeightedEvalMixture:
    """A streaming 2-source mixture (weights 0.7/0.3; `six` over HTTP) with an eval split (0.25, eval loss every
    2 steps) and RA-BC sample weighting (each source's own progress file; ACT with a per-sample loss), checkpoints
    every 2 steps: killed after step 3 (checkpoint 2) and resumed to step 6."""
    out = tmp_path_factory.mktemp("weighted_eval_mixture") / "mix"
    with RangeHTTPServer(six) as server:
        args = [
            *ACT,
            *COMMON,
            *EVAL,
            "--sample_weighting.type=rabc",
            "--dataset.streaming=true",
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{eight},{server.url}]",
            "--robostream.weights=[0.7,0.3]",
            "--max_eval_samples=12",
            f"--output_dir={out}",
            f"--robostream.record={out}.jsonl",
            "--steps=6",
        ]
        launch = {"script": SCRIPTS / "train_per_sample_act.py", "preimported": True}
        train_until_killed(lerobot_python, hf_home, args, record=Path(f"{out}.jsonl"), after_steps=3, **launch)
        resumed_log = train(lerobot_python, hf_home, resume(out), **launch)
    return WeightedEvalMixture(out=out, resumed_log=resumed_log)
