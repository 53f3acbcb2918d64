"""Depth cameras (lerobot 0.6.1's 12-bit log-quantised HEVC): every sample's depth is the frame asked for (its marker
reads back) and equals the dequantised codes that were written, float32 (1, H, W) in the unit asked, on every path:
map-style, streaming, whole loader batches (in workers), windows with padding, union mixtures, over HTTP ranges.
The frames lerobot's x265 writes are open-GOP (each odd frame decodes after the next keyframe), so random reads
seek to odd frames constantly: a seek that lands one keyframe late would show as the wrong marker.
Equality with lerobot's own samples: tests/compat/test_depth_compat.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from robostream import LeRobotDataset, Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset
from robostream.errors import DatasetFormatError, VideoDecodeError
from robostream.format.depth import DepthCoding, codes_from_depths, depths_from_codes
from robostream.synth import camera_key, depth_key, generate, read_depth_marker, render_depth
from tests.datasets.test_batch_assembly import assert_same_batches, both_paths
from tests.helpers import AV1_CONFIG

DEPTH = depth_key(0)
# av1_root's features, fps and sizes plus one depth camera (so the two mix); small files: episodes start mid-file.
CONFIG = dataclasses.replace(AV1_CONFIG, episodes=4, depth=1, episode_length=15)
CODING = DepthCoding(0.01, 10.0, 3.5, True, "m")  # lerobot's default encoder, as synth writes it


@pytest.fixture(scope="module")
def depth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("depth") / "ds", CONFIG, jobs=1)


def written_depths(episode: int, frame: int, unit: str) -> torch.Tensor:
    """The depths a reader must return for a frame: the written codes, dequantised (1, H, W)."""
    raw = render_depth(episode, 0, frame + 1, CONFIG.height, CONFIG.width)[frame, :, :, 0]  # frames follow t alone
    return torch.from_numpy(depths_from_codes(codes_from_depths(raw, CODING)[None], CODING, unit))


def check_depth(depth: torch.Tensor, episode: int, frame: int, unit: str = "mm") -> None:
    assert depth.dtype == torch.float32 and depth.shape == (1, CONFIG.height, CONFIG.width)
    in_metres = depth.numpy() / (1000.0 if unit == "mm" else 1.0)
    assert read_depth_marker(in_metres)[:2] == (episode, frame)
    assert torch.equal(depth, written_depths(episode, frame, unit))


@pytest.mark.parametrize("unit", ["mm", "m"])
@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_map_style_depth_is_the_written_frame_in_random_order(depth_root, unit, backend):
    dataset = LeRobotDataset(root=depth_root, depth_output_unit=unit, video_backend=backend)
    assert dataset.meta.depth_keys == [DEPTH] and len(list((depth_root / "videos" / DEPTH).rglob("*.mp4"))) >= 2
    for position in np.random.default_rng(0).permutation(len(dataset)).tolist():
        sample = dataset[position]
        check_depth(sample[DEPTH], int(sample["episode_index"]), int(sample["frame_index"]), unit)
        assert sample[camera_key(0)].dtype == torch.float32 and sample[camera_key(0)].shape[0] == 3


def test_stats_follow_the_unit(depth_root):
    metres = LeRobotDataset(root=depth_root, depth_output_unit="m").meta.stats[DEPTH]
    mm = LeRobotDataset(root=depth_root).meta.stats[DEPTH]
    for name, value in metres.items():
        assert np.array_equal(mm[name], value if name == "count" else value * 1000.0), name
    assert float(np.max(metres["max"])) == 12.0  # stats of the raw depths (the too-far corner), as lerobot's


def test_streaming_windows_pad_and_keep_depth_float_with_uint8_rgb(depth_root):
    deltas = {DEPTH: [-0.1, 0.0, 0.05], camera_key(0): [0.0]}
    dataset = StreamingLeRobotDataset(root=depth_root, delta_timestamps=deltas, return_uint8=True, seed=3)
    lengths = dataset.meta.episodes.length
    seen = list(dataset)
    assert len(seen) == int(lengths.sum())
    for sample in seen:
        episode, frame = int(sample["episode_index"]), int(sample["frame_index"])
        window, length = sample[DEPTH], int(lengths[episode])
        assert window.shape == (3, 1, CONFIG.height, CONFIG.width) and window.dtype == torch.float32
        wanted = [frame - 2, frame, frame + 1]
        assert sample[f"{DEPTH}_is_pad"].tolist() == [f < 0 or f >= length for f in wanted]
        for depth, at in zip(window, wanted):
            check_depth(depth, episode, min(max(at, 0), length - 1))
        assert sample[camera_key(0)].dtype == torch.uint8


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_batches_equal_the_collate_of_samples(depth_root, workers):
    dataset = StreamingLeRobotDataset(
        root=depth_root, return_uint8=True, seed=1, delta_timestamps={DEPTH: [-0.05, 0.0]}
    )
    fast, reference = both_paths(dataset, batch_size=8, num_workers=workers)
    assert_same_batches(fast, reference)
    assert all(batch[DEPTH].dtype == torch.float32 for batch in fast)


def test_a_union_mixture_fills_depth_with_float_zeros_where_a_source_has_none(depth_root, av1_root):
    dataset = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=depth_root), Source(root=av1_root)], features="union"),
        return_uint8=True,
        seed=2,
    )
    batches = list(StreamingDataLoader(dataset, batch_size=16, num_workers=0))
    reference = list(
        StreamingDataLoader(dataset, batch_size=16, num_workers=0, collate_fn=torch.utils.data.default_collate)
    )
    assert_same_batches(batches, reference)
    for batch in batches:
        assert batch[DEPTH].dtype == torch.float32
        lacking = batch["dataset_index"] == 1
        assert torch.equal(batch[f"{DEPTH}_is_pad"], lacking)
        assert not batch[DEPTH][lacking].any()
        for row in torch.nonzero(~lacking).flatten().tolist():
            check_depth(batch[DEPTH][row], int(batch["episode_index"][row]), int(batch["frame_index"][row]))
    with pytest.raises(ValueError, match=DEPTH):
        StreamingLeRobotDataset(mixture=Mixture(sources=[Source(root=depth_root), Source(root=av1_root)]))  # strict


def test_depth_over_http_ranges_equals_local(depth_root, monkeypatch):
    from tests.remote.servers import RangeHTTPServer

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    local = LeRobotDataset(root=depth_root)
    with RangeHTTPServer(depth_root, latency_s=0.005) as store:
        remote = LeRobotDataset(root=store.url)
        for position in (0, 7, 18, len(local) - 1):
            assert torch.equal(remote[position][DEPTH], local[position][DEPTH])
        streamed = {int(s["index"]): s[DEPTH] for s in StreamingLeRobotDataset(root=store.url, seed=5)}
    assert len(streamed) == len(local)
    for position in (3, 20, 41):
        assert torch.equal(streamed[int(local[position]["index"])], local[position][DEPTH])


def copy_with_info(root: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    info_path = copy / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    edit(info["features"])
    info_path.write_text(json.dumps(info))
    return copy


def test_an_rgb_video_marked_as_depth_is_an_error_naming_the_file(depth_root, tmp_path):
    def mark_rgb(features):
        features[camera_key(0)]["info"] = dict(features[DEPTH]["info"])

    dataset = LeRobotDataset(root=copy_with_info(depth_root, tmp_path, mark_rgb))
    with pytest.raises(VideoDecodeError, match=rf"{camera_key(0)}.*yuv420p|yuv420p.*{camera_key(0)}"):
        dataset[0]


def test_missing_quantisation_is_refused_at_construction(depth_root, tmp_path):
    def drop_shift(features):
        del features[DEPTH]["info"]["video.shift"]

    with pytest.raises(DatasetFormatError, match=rf"{DEPTH}.*video.shift"):
        LeRobotDataset(root=copy_with_info(depth_root, tmp_path, drop_shift))
