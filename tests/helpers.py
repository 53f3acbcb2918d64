"""What tests share besides fixtures: the generated datasets' configurations, reading a dataset's columns
straight from its files, copies and listings of folders, and running the CLI in a fresh interpreter. Fixtures live
in the conftest files and import from here; tests import from here, never from a conftest."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from robostream.synth import SynthConfig

REPO = Path(__file__).resolve().parents[1]
AV1_CONFIG = SynthConfig(
    episodes=7,
    cameras=2,
    height=64,
    width=64,
    fps=20,
    episode_length=24,
    state_dim=6,
    codec="av1",
    gop=2,
    data_file_mb=0.008,
    video_file_mb=0.03,
    seed=3,
)
# A small two-camera H.264 dataset with several data and video files (tests of the read path's resources).
SMALL_H264_CONFIG = SynthConfig(
    episodes=4,
    cameras=2,
    fps=20,
    episode_length=15,
    state_dim=4,
    seed=3,
    height=64,
    width=64,
    codec="h264",
    gop=10,
    data_file_mb=0.01,
    video_file_mb=0.04,
)
H264_CONFIG = SynthConfig(
    episodes=4,
    cameras=2,
    height=64,
    width=80,
    fps=15,
    episode_length=40,
    state_dim=4,
    codec="h264",
    gop=48,
    data_file_mb=0.01,
    video_file_mb=0.05,
    seed=5,
)

# Limits small enough for several data files and several mp4s per camera (cameras rolling over at different
# episodes), as the converter must cut them.
DATA_MB = 0.006
VIDEO_MB = 0.035  # cam0 of V21_AV1 is 0.040-0.046 MB with PyAV 15-18: 2+ files per camera with either
V21_AV1 = SynthConfig(
    episodes=8,
    cameras=2,
    height=64,
    width=64,
    fps=20,
    episode_length=16,
    state_dim=4,
    codec="av1",
    gop=2,
    seed=11,
    codebase_version="v2.1",
)
# H.264 with B-frames (negative DTS at the start of each episode file) and a GOP longer than an episode.
V21_H264 = SynthConfig(
    episodes=4,
    cameras=2,
    height=64,
    width=80,
    fps=15,
    episode_length=20,
    state_dim=4,
    codec="h264",
    gop=48,
    seed=12,
    codebase_version="v2.1",
)


def dataset_indices(root: Path, episodes: list[int] | None = None) -> list[int]:
    """The global `index` values of the frames of `episodes` (default all), from the episode table."""
    from robostream.format.metadata import load_metadata

    table = load_metadata(root).episodes
    chosen = table.episode_index if episodes is None else episodes
    return [
        i
        for e in chosen
        for i in range(int(table.from_index[table.row_of(int(e))]), int(table.to_index[table.row_of(int(e))]))
    ]


def data_column(root: Path, key: str):
    """A data column of the whole dataset as numpy, row = global index (read straight from the parquet files)."""
    import numpy as np
    import pyarrow.parquet as pq

    tables = [pq.read_table(p, columns=["index", key]) for p in sorted(Path(root).glob("data/*/*.parquet"))]
    index = np.concatenate([t.column("index").to_numpy() for t in tables])
    values = np.concatenate([np.stack(t.column(key).to_numpy(zero_copy_only=False)) for t in tables])
    return values[np.argsort(index)]


def assert_same_sample(a: dict, b: dict) -> None:
    """Two samples (or batches) with the same keys and equal values: tensors element for element."""
    import torch

    assert a.keys() == b.keys()
    for key, value in b.items():
        assert torch.equal(a[key], value) if isinstance(value, torch.Tensor) else a[key] == value, key


def read_records(path: Path) -> dict[int, list[dict]]:
    """rank -> its recorded steps, from the <stem>.rank<r>.jsonl files of train_streaming.py --record_samples."""
    return {
        int(p.stem.rsplit(".rank", 1)[1]): [json.loads(line) for line in p.read_text().splitlines()]
        for p in path.parent.glob(f"{path.stem}.rank*{path.suffix}")
    }


def copy_tree(src: Path, dst: Path) -> Path:
    """A writable copy of a fixture dataset (or any folder) for tests that damage it."""
    shutil.copytree(src, dst)
    return dst


def tree_listing(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (to prove an input was left untouched)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(*args: str, env: dict[str, str] | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """`robostream ...` in a fresh interpreter and its own process group (real processes: the run can be killed
    as a whole with its workers, limited, ...)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "robostream.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=240,
        preexec_fn=preexec_fn,
        start_new_session=True,
    )


def convert_args(src: Path, *extra: str) -> list[str]:
    return [str(src), "--data-file-size-in-mb", str(DATA_MB), "--video-file-size-in-mb", str(VIDEO_MB), *extra]


def ranks_output(proc: subprocess.CompletedProcess, limit: int = 4000) -> str:
    """The tail of a torchrun job's output without torchrun's own report of a failed rank (its traceback and failure
    table say only that a rank exited non-zero, and would push the rank's own error out of the tail)."""
    text = proc.stdout + proc.stderr
    report = text.find("ChildFailedError")
    if report != -1:
        start = text.rfind("Traceback (most recent call last):", 0, report)
        text = text[: start if start != -1 else report] or text
    return text[-limit:]


# Two gloo processes that add their ranks: whether torchrun can run anything distributed on this machine at all.
_PROBE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
assert total.item() == 1.0, total
dist.destroy_process_group()
"""


@functools.cache
def torchrun_unavailable() -> str | None:
    """Why torchrun cannot start two gloo processes here (None when it can): probed once per session with a
    trivial script, so that a test's own job failing is a failure, never a skip."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "probe.py"
        script.write_text(_PROBE)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, OMP_NUM_THREADS="1")
            )
        except subprocess.TimeoutExpired:
            return "torchrun could not run a trivial 2-process gloo job here within 180 s"
    if proc.returncode:
        return (
            f"torchrun cannot run a trivial 2-process gloo job here (exit {proc.returncode}): "
            f"{ranks_output(proc, 1500)}"
        )
    return None


def run_torchrun(
    args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --standalone ARGS` (skipped only when torchrun cannot run the trivial probe;
    the caller fails on anything its own job did wrong, see `fail_unless_ranks`)."""
    reason = torchrun_unavailable()
    if reason is not None:
        pytest.skip(reason)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", *args]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)),
    )


def fail_unless_ranks(proc: subprocess.CompletedProcess, found: int, expected: int, what: str) -> None:
    """Fail, with the ranks' output, unless the job exited 0 and all `expected` ranks left their `what`."""
    if proc.returncode != 0 or found != expected:
        pytest.fail(
            f"{found} of {expected} ranks wrote {what}, exit {proc.returncode}; torchrun itself works here "
            f"(the probe ran), so the job failed:\n{ranks_output(proc)}"
        )


def decode_at_timestamps(decoder, timestamps_s, tolerance_s, context=""):
    """Contiguous (N, C, H, W) frames nearest to each timestamp (the readers' decode_unique + gather_chw)."""
    # imported here: the torch-free tests import this module too
    from robostream.video.layout import gather_chw
    from robostream.video.lookup import decode_unique

    return gather_chw(*decode_unique(decoder, timestamps_s, tolerance_s, context))
