"""Opt-in comparison of `robostream convert` (v2.1 -> v3.0) with the real lerobot 0.6.1 converter.

For two v2.1 datasets (robostream's synth, 3 AV1 cameras; and an image-feature dataset without videos, written with
V21Writer), lerobot converts a copy in place (tests/compat/lerobot_convert.py, in the lerobot interpreter) and
robostream converts the same input with 1 and with 2 workers (`out=`). A third, with a depth camera (legacy block
under `info` or `video_info`), is compared file for file too. The size limits are small so that there are
several data files and several mp4s per camera. Then:
  * `compare_datasets(ours, lerobot's) == []`: same file set, parquet schemas and values, mp4 packets, JSON;
  * lerobot's LeRobotDataset on lerobot's output (tests/compat/lerobot_dump.py) and robostream's LeRobotDataset on
    robostream's output return the same samples (helpers of test_lerobot_compat.py).

Enable with:  ROBOSTREAM_LEROBOT_PYTHON=/path/to/python-with-lerobot  python -m pytest tests/compat
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.synth import SynthConfig, generate
from tests.compat.test_lerobot_compat import (
    SPEC_NAMES,
    SYNTH_DELTA,
    _compare,
    _dump,
    _episode_lengths,
    _report,
    _run_lerobot,
    _specs,
)

# 10 episodes of ~20 frames, 3 cameras: per episode ~6 KB of parquet and 6-10, 13-22, 25-39 KB of mp4 per camera,
# so every file holds several episodes and the cameras roll over at different episodes.
VIDEO_CONFIG = SynthConfig(
    episodes=10,
    cameras=3,
    height=64,
    width=96,
    fps=20,
    episode_length=20,
    state_dim=6,
    codec="av1",
    gop=2,
    seed=21,
    codebase_version="v2.1",
)
VIDEO_LIMITS = (0.015, 0.07)  # (data MB, video MB)
IMAGE_LIMITS = (0.09, 0.07)  # the image dataset has 22-42 KB of PNGs per episode: 2 data files
IMAGE_SHAPE = (32, 48, 3)
IMAGE_DELTA = {"observation.image": [-0.1, 0.0], "observation.state": [-0.1, 0.0, 0.1]}  # fps 10
WORKERS = (1, 2)


def _image_v21(root: Path) -> Path:
    """A v2.1 dataset whose camera is an `image` feature (PNG in the parquet), fps 10; episode 3 changes task."""
    from robostream.writer.v21 import V21Writer

    rng = np.random.default_rng(7)
    features = {
        "observation.image": {"dtype": "image", "shape": list(IMAGE_SHAPE), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": [3], "names": None},
    }
    with V21Writer(root, 10, features) as writer:
        for episode, length in enumerate((5, 7, 4, 8, 6, 5)):
            images = rng.integers(0, 255, size=(length, *IMAGE_SHAPE), dtype=np.uint8)
            task = ["look"] * (length // 2) + ["grasp"] * (length - length // 2) if episode == 3 else "look"
            writer.add_episode(
                {"observation.image": images, "observation.state": rng.random((length, 3))},
                task=task,
                video_files={},
                video_stats={},
            )
    return root


def _convert_both(python: str, hf_home: Path, source: Path, tmp: Path, limits: tuple[float, float]) -> dict:
    """lerobot's in-place conversion of a copy of `source`, and robostream's with each of WORKERS (`out=`)."""
    data_mb, video_mb = limits
    lerobot_root = Path(shutil.copytree(source, tmp / "lerobot" / "ds"))
    _run_lerobot(
        python, hf_home, "lerobot_convert.py", str(lerobot_root), "--data-mb", str(data_mb), "--video-mb", str(video_mb)
    )
    ours = {}
    for workers in WORKERS:
        ours[workers] = tmp / f"ours_w{workers}"
        convert(
            source,
            out=ours[workers],
            workers=workers,
            data_file_size_in_mb=data_mb,
            video_file_size_in_mb=video_mb,
            log=lambda line: None,
        )
    return {"source": source, "lerobot": lerobot_root, "ours": ours}


@pytest.fixture(scope="module")
def video_converted(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("convert_video")
    return _convert_both(lerobot_python, hf_home, generate(tmp / "v21", VIDEO_CONFIG), tmp, VIDEO_LIMITS)


@pytest.fixture(scope="module")
def image_converted(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("convert_image")
    return _convert_both(lerobot_python, hf_home, _image_v21(tmp / "v21"), tmp, IMAGE_LIMITS)


@pytest.fixture(params=["video", "image"])
def converted(request: pytest.FixtureRequest) -> dict:
    return request.getfixturevalue(f"{request.param}_converted")


def test_lerobot_converted_in_place_with_several_files(video_converted: dict, image_converted: dict) -> None:
    """Guard: lerobot converted the copies in place (input kept as ds_old) into several data files and several
    mp4 files per camera."""
    for side in (video_converted, image_converted):
        root = side["lerobot"]
        assert (root.parent / "ds_old" / "meta" / "episodes.jsonl").is_file()
        assert not (root.parent / "ds_v30").exists()
        assert len(list((root / "data").glob("chunk-*/file-*.parquet"))) >= 2, root
    cameras = sorted((video_converted["lerobot"] / "videos").iterdir())
    assert len(cameras) == VIDEO_CONFIG.cameras
    for camera in cameras:
        assert len(list(camera.glob("chunk-*/file-*.mp4"))) >= 2, camera
    assert not (image_converted["lerobot"] / "videos").exists()


@pytest.mark.parametrize("workers", WORKERS)
def test_output_is_lerobots(converted: dict, workers: int) -> None:
    problems = compare_datasets(converted["ours"][workers], converted["lerobot"])
    assert problems == [], "\n".join(problems[:60])


def _lerobot_samples(lerobot_python: str, hf_home: Path, converted: dict, delta: dict, episodes: list[int]) -> dict:
    """lerobot's samples of lerobot's conversion; robostream then reads its own 2-worker conversion."""
    root = converted["lerobot"]
    side = _dump(
        lerobot_python, hf_home, root, root.parent / "dump.npz", _specs(_episode_lengths(root), delta, episodes)
    )
    return {**side, "root": converted["ours"][2]}


@pytest.fixture(scope="module")
def video_dumped(lerobot_python: str, hf_home: Path, video_converted: dict) -> dict:
    return _lerobot_samples(lerobot_python, hf_home, video_converted, SYNTH_DELTA, [9, 4])


@pytest.fixture(scope="module")
def image_dumped(lerobot_python: str, hf_home: Path, image_converted: dict) -> dict:
    return _lerobot_samples(lerobot_python, hf_home, image_converted, IMAGE_DELTA, [3, 1])


@pytest.mark.parametrize("kind", ["video", "image"])
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_converted_dataset_loads_like_lerobots(request: pytest.FixtureRequest, kind: str, name: str) -> None:
    side = request.getfixturevalue(f"{kind}_dumped")
    problems = _compare(side, name)
    assert not problems, _report(problems, side, name)


# A depth camera (lerobot's HEVC 12-bit stream) beside an RGB one, its legacy block under `info` or `video_info`:
# ~12-18 KB per depth episode, so some files join two episodes.
DEPTH_CONFIG = SynthConfig(
    episodes=4,
    cameras=1,
    height=48,
    width=64,
    fps=10,
    episode_length=10,
    state_dim=2,
    codec="h264",
    depth=1,
    seed=5,
    codebase_version="v2.1",
)
DEPTH_LIMITS = (0.01, 0.03)


@pytest.fixture(scope="module", params=["info", "video_info"])
def depth_converted(
    request: pytest.FixtureRequest, lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict:
    tmp = tmp_path_factory.mktemp(f"convert_depth_{request.param}")
    source = generate(tmp / "v21", SynthConfig(**{**DEPTH_CONFIG.__dict__, "depth_block": request.param}))
    return _convert_both(lerobot_python, hf_home, source, tmp, DEPTH_LIMITS)


def _depth_feature(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())["features"]["observation.images.depth0"]


@pytest.mark.parametrize("workers", WORKERS)
def test_depth_output_is_lerobots(depth_converted: dict, workers: int) -> None:
    """Same files, packets and JSON as lerobot's conversion; the depth feature is the input's, copied as it is."""
    ours = depth_converted["ours"][workers]
    problems = compare_datasets(ours, depth_converted["lerobot"])
    assert problems == [], "\n".join(problems[:60])
    assert _depth_feature(ours) == _depth_feature(depth_converted["source"])
    assert len(list((ours / "videos/observation.images.depth0").rglob("*.mp4"))) >= 2
