"""Small v2.1 datasets (the converter's input) and a reference conversion of each, shared by the convert tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.synth import SynthConfig, generate

# Limits small enough for several data files and several mp4s per camera (cameras rolling over at different
# episodes), as the converter must cut them.
DATA_MB = 0.006
VIDEO_MB = 0.035  # cam0 of V21_AV1 is 0.040-0.046 MB with PyAV 15-18: 2+ files per camera with either
V21_AV1 = SynthConfig(episodes=8, cameras=2, height=64, width=64, fps=20, episode_length=16, state_dim=4,
                      codec="av1", gop=2, seed=11, codebase_version="v2.1")
# H.264 with B-frames (negative DTS at the start of each episode file) and a GOP longer than an episode.
V21_H264 = SynthConfig(episodes=4, cameras=2, height=64, width=80, fps=15, episode_length=20, state_dim=4,
                       codec="h264", gop=48, seed=12, codebase_version="v2.1")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def v21_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("v21") / "ds", V21_AV1)


@pytest.fixture(scope="session")
def v21_h264_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("v21h264") / "ds", V21_H264)


@pytest.fixture(scope="session")
def reference(v21_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted one-worker conversion of v21_root."""
    out = tmp_path_factory.mktemp("reference") / "v30"
    convert(v21_root, out=out, workers=1, data_file_size_in_mb=DATA_MB, video_file_size_in_mb=VIDEO_MB,
            log=lambda line: None)
    return out


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def tree_listing(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (to prove an input was left untouched)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(*args: str, env: dict[str, str] | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """`robostream ...` in a fresh interpreter and its own process group (real processes: the run can be killed
    as a whole with its workers, limited, ...)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "robostream.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=240, preexec_fn=preexec_fn, start_new_session=True)


def convert_args(src: Path, *extra: str) -> list[str]:
    return [str(src), "--data-file-size-in-mb", str(DATA_MB), "--video-file-size-in-mb", str(VIDEO_MB), *extra]
