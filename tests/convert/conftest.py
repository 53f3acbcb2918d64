"""Small v2.1 datasets (the converter's input) and a reference conversion of each, shared by the convert tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.synth import generate
from tests.helpers import DATA_MB, V21_AV1, V21_H264, VIDEO_MB


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
    convert(
        v21_root,
        out=out,
        workers=1,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=lambda line: None,
    )
    return out
