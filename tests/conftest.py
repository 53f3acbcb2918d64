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

from robostream.synth import generate
from tests.helpers import AV1_CONFIG, H264_CONFIG
from tests.lerobot_env import ENV_VAR, skip_reason

# Columns derived from the tables (storage/derived.py) go to a fresh folder per test session, never the user's cache;
# subprocesses (torchrun, benchmark probes, DataLoader workers) inherit it.
os.environ["ROBOSTREAM_CACHE"] = tempfile.mkdtemp(prefix="robostream-test-cache-")


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
