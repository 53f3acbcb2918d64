"""Depth cameras written as lerobot 0.6.1 writes them: synth --depth (v3.0) and DatasetWriter with float frames.

The encoding is lossless, so every decoded 12-bit code must equal lerobot's quantisation of the raw depths.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from robostream.convert.verify import verify
from robostream.format.depth import DEPTH_CODES, codes_from_depths, depths_from_codes
from robostream.format.stats import aggregate_stats, frame_stats
from robostream.synth import (
    DEPTH_BEYOND_M,
    DEPTH_DROPOUT_M,
    SynthConfig,
    depth_key,
    episode_lengths,
    generate,
    read_depth_marker,
    render_depth,
)
from robostream.video.encode import encode_depth_video
from robostream.writer.depth import LEROBOT_DEPTH_CODING, depth_feature
from robostream.writer.v30 import DatasetWriter

H, W, FPS = 48, 64, 10
# 3 episodes of 9-15 frames; a depth episode is ~10-20 KB, so each depth mp4 holds 2+ episodes (stream copy joins)
CONFIG = SynthConfig(
    episodes=3,
    cameras=1,
    height=H,
    width=W,
    fps=FPS,
    episode_length=12,
    state_dim=2,
    codec="h264",
    depth=2,
    video_file_mb=0.04,
)


def lerobot_depth_feature(height: int, width: int) -> dict:
    """What lerobot 0.6.1 writes for a float-metre depth camera (its own dataset, /tmp/depth/ds64), resized."""
    return {
        "dtype": "video",
        "shape": [height, width, 1],
        "names": ["height", "width", "channels"],
        "info": {
            "is_depth_map": True,
            "depth_unit": "m",
            "video.height": height,
            "video.width": width,
            "video.codec": "hevc",
            "video.pix_fmt": "gray12le",
            "video.fps": FPS,
            "video.channels": 1,
            "has_audio": False,
            "video.g": 2,
            "video.crf": 30,
            "video.preset": None,
            "video.fast_decode": 0,
            "video.video_backend": "pyav",
            "video.extra_options": {"x265-params": "lossless=1"},
            "video.depth_min": 0.01,
            "video.depth_max": 10.0,
            "video.shift": 3.5,
            "video.use_log": True,
        },
    }


def decode_codes(path: Path) -> tuple[list[int], np.ndarray, Fraction]:
    """(pts of every frame in presentation order, uint16 codes (N, H, W), time base) of an mp4, with PyAV."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [(frame.pts, frame.to_ndarray(format="gray12le")) for frame in container.decode(stream)]
        return [pts for pts, _ in frames], np.stack([codes for _, codes in frames]), stream.time_base


@pytest.fixture(scope="module")
def depth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synth_depth") / "ds", CONFIG, jobs=2)


def _episodes(root: Path) -> dict:
    return pq.read_table(next((root / "meta/episodes").rglob("*.parquet"))).to_pydict()


def test_depth_videos_decode_to_the_codes_of_the_raw_depths(depth_root: Path):
    episodes, lengths = _episodes(depth_root), episode_lengths(CONFIG)
    for camera in range(CONFIG.depth):
        key = depth_key(camera)
        files = episodes[f"videos/{key}/file_index"]
        assert len(set(files)) < len(files), "a depth file should join several episodes"
        for file_index in sorted(set(files)):
            path = depth_root / f"videos/{key}/chunk-000/file-{file_index:03d}.mp4"
            pts, codes, time_base = decode_codes(path)
            in_file = [e for e, f in enumerate(files) if f == file_index]
            want = np.concatenate(
                [
                    codes_from_depths(render_depth(e, camera, lengths[e], H, W)[..., 0], LEROBOT_DEPTH_CODING)
                    for e in in_file
                ]
            )
            np.testing.assert_array_equal(codes, want, err_msg=str(path))
            ticks = 1 / (FPS * time_base)  # every frame exactly on i / fps
            assert ticks.denominator == 1 and pts == [i * ticks for i in range(len(want))], path
            start = 0.0
            for e in in_file:
                assert episodes[f"videos/{key}/from_timestamp"][e] == pytest.approx(start)
                start += lengths[e] / FPS
                assert episodes[f"videos/{key}/to_timestamp"][e] == pytest.approx(start)
    assert verify(depth_root)["problems"] == []


def test_depth_content_exercises_the_codes_and_clamping():
    depths = render_depth(1, 0, 8, H, W)
    codes = codes_from_depths(depths, LEROBOT_DEPTH_CODING)
    assert depths.dtype == np.float32 and depths.shape == (8, H, W, 1)
    assert depths.min() == DEPTH_DROPOUT_M and depths.max() == DEPTH_BEYOND_M  # out of [0.01, 10] m: clamped
    assert codes.min() == 0 and codes.max() == DEPTH_CODES - 1 and len(np.unique(codes)) > 1000
    inside = depths[(depths > 0.01) & (depths < 10)]
    assert inside.min() < 0.4 and inside.max() > 7.0  # a near object and a far plane
    assert not np.array_equal(depths[0], depths[1]) and not np.array_equal(depths, render_depth(2, 0, 8, H, W))


def test_frames_say_which_episode_frame_and_camera_they_are(depth_root: Path):
    episodes = _episodes(depth_root)
    key = depth_key(1)
    pts, codes, _ = decode_codes(depth_root / f"videos/{key}/chunk-000/file-000.mp4")
    in_file = [e for e, f in enumerate(episodes[f"videos/{key}/file_index"]) if f == 0]
    depths = depths_from_codes(codes, LEROBOT_DEPTH_CODING, "m")
    expected = [(e, i, 1) for e in in_file for i in range(episodes["length"][e])]
    assert [read_depth_marker(frame) for frame in depths] == expected


def test_info_json_depth_feature_is_lerobots(depth_root: Path):
    features = json.loads((depth_root / "meta/info.json").read_text())["features"]
    for camera in range(CONFIG.depth):
        assert features[depth_key(camera)] == lerobot_depth_feature(H, W)
    assert list(features)[-7:-5] == [depth_key(0), depth_key(1)]  # after the RGB camera, before the index columns
    assert features["observation.images.cam0"]["info"]["video.is_depth_map"] is False


def test_depth_stats_are_of_the_raw_frames(depth_root: Path):
    stats = json.loads((depth_root / "meta/stats.json").read_text())[depth_key(0)]
    lengths = episode_lengths(CONFIG)
    per_episode = []
    for e, n in enumerate(lengths):
        one = frame_stats(render_depth(e, 0, n, H, W)[:, ::4, ::4])
        per_episode.append({depth_key(0): {**one, "count": np.array([n])}})
    want = aggregate_stats(per_episode)[depth_key(0)]
    assert stats["min"] == [[[DEPTH_DROPOUT_M]]] and stats["max"] == [[[DEPTH_BEYOND_M]]]  # not clamped, not /255
    assert stats["count"] == [sum(lengths)]
    assert set(stats) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    for name, value in stats.items():
        assert np.asarray(value).shape == ((1,) if name == "count" else (1, 1, 1)), name
        np.testing.assert_allclose(value, want[name], rtol=1e-12, err_msg=name)


def test_writer_encodes_float_depth_frames(tmp_path: Path):
    rng = np.random.default_rng(3)
    key = "observation.images.depth"
    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": None},
        key: depth_feature(height=16, width=24),
    }
    depths = [rng.uniform(0.0, 12.0, size=(n, 16, 24, 1)).astype(np.float32) for n in (5, 4)]
    with DatasetWriter(tmp_path / "ds", FPS, features) as writer:
        for frames in depths:
            writer.add_episode(
                {"observation.state": np.zeros((len(frames), 2), np.float32)}, task="t", videos={key: frames}
            )
    _, codes, _ = decode_codes(tmp_path / f"ds/videos/{key}/chunk-000/file-000.mp4")
    np.testing.assert_array_equal(codes, codes_from_depths(np.concatenate(depths)[..., 0], LEROBOT_DEPTH_CODING))
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["features"][key] == lerobot_depth_feature(16, 24)
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())[key]
    assert stats["max"][0][0][0] == pytest.approx(float(max(d[:, ::4, ::4].max() for d in depths)))


def test_writer_refuses_what_is_not_a_depth_camera(tmp_path: Path):
    key = "observation.images.depth"
    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": None},
        key: depth_feature(height=16, width=24),
    }
    with pytest.raises(ValueError, match=r"episode 0 depth camera 'observation.images.depth'.*uint8"):
        with DatasetWriter(tmp_path / "ds", FPS, features) as writer:
            writer.add_episode(
                {"observation.state": np.zeros((3, 2), np.float32)},
                task="t",
                videos={key: np.zeros((3, 16, 24, 1), np.uint8)},
            )
    assert not (tmp_path / "ds").exists()
    rgb_marked = {**features, key: {**depth_feature(height=16, width=24), "shape": [16, 24, 3]}}
    with pytest.raises(ValueError, match=r"depth feature 'observation.images.depth': shape \[16, 24, 3\]"):
        DatasetWriter(tmp_path / "ds", FPS, rgb_marked)


def test_encode_depth_video_refuses_what_is_not_12_bit_codes(tmp_path: Path):
    path = tmp_path / "d.mp4"
    with pytest.raises(ValueError, match=r"d.mp4: depth frame 1 holds code 4096"):
        encode_depth_video([np.zeros((16, 16), np.uint16), np.full((16, 16), 4096, np.uint16)], path, fps=FPS)
    with pytest.raises(ValueError, match=r"d.mp4: depth frame 0 is float32 \(16, 16\)"):
        encode_depth_video([np.zeros((16, 16), np.float32)], path, fps=FPS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"depth": -1}, "depth=-1"),
        ({"depth_block": "video_info"}, "v2.x spelling"),
        ({"depth_block": "info_block"}, "choose one of"),
    ],
)
def test_synth_refuses_bad_depth_settings(tmp_path: Path, changes: dict, message: str):
    config = SynthConfig(**{**CONFIG.__dict__, **changes})
    with pytest.raises(ValueError, match=message):
        generate(tmp_path / "ds", config)
    assert not (tmp_path / "ds").exists()
