"""Shared fixtures: small generated datasets with SEVERAL data and video files per camera.

The datasets are tiny (64x64 frames, a few short episodes) but keep every structural property that breaks loaders:
several parquet files, several mp4 files per camera with cameras rolling over at different episodes, episodes
with two tasks, and frames that carry a readable (episode, frame, camera) marker.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from robostream.synth import SynthConfig, generate
from tests.lerobot_env import ENV_VAR, skip_reason

# Columns derived from the tables (storage/derived.py) go to a fresh folder per test session, never the user's cache;
# subprocesses (torchrun, benchmark probes, DataLoader workers) inherit it.
os.environ["ROBOSTREAM_CACHE"] = tempfile.mkdtemp(prefix="robostream-test-cache-")

AV1_CONFIG = SynthConfig(episodes=7, cameras=2, height=64, width=64, fps=20, episode_length=24, state_dim=6,
                         codec="av1", gop=2, data_file_mb=0.008, video_file_mb=0.03, seed=3)
H264_CONFIG = SynthConfig(episodes=4, cameras=2, height=64, width=80, fps=15, episode_length=40, state_dim=4,
                          codec="h264", gop=48, data_file_mb=0.01, video_file_mb=0.05, seed=5)


@pytest.fixture(scope="session")
def av1_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AV1, GOP 2 (lerobot's default encoding)."""
    return generate(tmp_path_factory.mktemp("av1") / "ds", AV1_CONFIG)


@pytest.fixture(scope="session")
def h264_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """H.264 with a GOP longer than an episode (older and third-party datasets), B-frames on."""
    return generate(tmp_path_factory.mktemp("h264") / "ds", H264_CONFIG)


@pytest.fixture(params=["av1", "h264"])
def any_root(request: pytest.FixtureRequest, av1_root: Path, h264_root: Path) -> Path:
    return av1_root if request.param == "av1" else h264_root


def dataset_indices(root: Path, episodes: list[int] | None = None) -> list[int]:
    """The global `index` values of the frames of `episodes` (default all), from the episode table."""
    from robostream.format.metadata import load_metadata

    table = load_metadata(root).episodes
    chosen = table.episode_index if episodes is None else episodes
    return [i for e in chosen for i in range(int(table.from_index[table.row_of(int(e))]),
                                              int(table.to_index[table.row_of(int(e))]))]


def data_column(root: Path, key: str):
    """A data column of the whole dataset as numpy, row = global index (read straight from the parquet files)."""
    import numpy as np
    import pyarrow.parquet as pq

    tables = [pq.read_table(p, columns=["index", key]) for p in sorted(Path(root).glob("data/*/*.parquet"))]
    index = np.concatenate([t.column("index").to_numpy() for t in tables])
    values = np.concatenate([np.stack(t.column(key).to_numpy(zero_copy_only=False)) for t in tables])
    return values[np.argsort(index)]


def copy_dataset(src: Path, dst: Path) -> Path:
    """A writable copy of a fixture dataset for tests that damage it."""
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private, offline HF_HOME for the lerobot subprocesses."""
    return tmp_path_factory.mktemp("hf_home")


@pytest.fixture(scope="session")
def lerobot_python(hf_home: Path) -> str:
    """The interpreter with lerobot installed (opt-in: ROBOSTREAM_LEROBOT_PYTHON); skips when there is none."""
    reason = skip_reason(hf_home)
    if reason:
        pytest.skip(reason)
    return os.environ[ENV_VAR]
