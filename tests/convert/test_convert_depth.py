"""v2.1 depth cameras (legacy marker under `info` or in a `video_info` block) through `robostream convert`: the
feature comes out as lerobot 0.6.1's converter writes it (copied as it was: no depth_unit, no migration) and the
stream-copied videos decode to the same 12-bit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from robostream.convert import convert
from robostream.convert.verify import verify
from robostream.format.depth import codes_from_depths
from robostream.synth import SynthConfig, depth_key, episode_lengths, generate, render_depth
from robostream.writer.depth import LEROBOT_DEPTH_CODING
from tests.writer.test_synth_depth import decode_codes

H, W, FPS = 48, 64, 10
DEPTH_V21 = SynthConfig(
    episodes=4,
    cameras=1,
    height=H,
    width=W,
    fps=FPS,
    episode_length=10,
    state_dim=2,
    codec="h264",
    depth=1,
    codebase_version="v2.1",
)
VIDEO_MB = 0.03  # a depth episode is ~12-18 KB: 2 episodes per output file, several files


def legacy_block() -> dict:
    """A v2.x depth camera's block: the v2.1 video keys with the marker true, then the quantisation."""
    return {
        "video.height": H,
        "video.width": W,
        "video.codec": "hevc",
        "video.pix_fmt": "gray12le",
        "video.is_depth_map": True,
        "video.fps": FPS,
        "video.channels": 1,
        "has_audio": False,
        "video.depth_min": 0.01,
        "video.depth_max": 10.0,
        "video.shift": 3.5,
        "video.use_log": True,
    }


@pytest.fixture(scope="module", params=["info", "video_info"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp(f"depth_{request.param}")
    config = SynthConfig(**{**DEPTH_V21.__dict__, "depth_block": request.param})
    source = generate(tmp / "v21", config, jobs=2)
    convert(
        source,
        out=tmp / "v30",
        workers=1,
        data_file_size_in_mb=0.01,
        video_file_size_in_mb=VIDEO_MB,
        log=lambda line: None,
    )
    return {"block": request.param, "config": config, "source": source, "out": tmp / "v30"}


def _feature(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())["features"][depth_key(0)]


def test_v21_depth_camera_carries_the_legacy_block(converted: dict):
    feature = _feature(converted["source"])
    assert feature == {
        "dtype": "video",
        "shape": [H, W, 1],
        "names": ["height", "width", "channels"],
        converted["block"]: legacy_block(),
    }


def test_converted_depth_feature_is_the_input_feature(converted: dict):
    assert _feature(converted["out"]) == _feature(converted["source"])  # lerobot's convert_info: copied as it is


def test_converted_depth_videos_decode_to_the_same_codes(converted: dict):
    out, lengths = converted["out"], episode_lengths(converted["config"])
    key = depth_key(0)
    episodes = pq.read_table(next((out / "meta/episodes").rglob("*.parquet"))).to_pydict()
    files = episodes[f"videos/{key}/file_index"]
    assert 1 < len(set(files)) < len(files), "expected several files, some joining several episodes"
    for file_index in sorted(set(files)):
        _, codes, _ = decode_codes(out / f"videos/{key}/chunk-000/file-{file_index:03d}.mp4")
        want = np.concatenate(
            [
                codes_from_depths(render_depth(e, 0, lengths[e], H, W)[..., 0], LEROBOT_DEPTH_CODING)
                for e, f in enumerate(files)
                if f == file_index
            ]
        )
        np.testing.assert_array_equal(codes, want)
    stats = json.loads((out / "meta/stats.json").read_text())[key]
    assert stats["min"] == [[[0.0]]] and stats["max"] == [[[12.0]]]
    assert verify(out)["problems"] == []
