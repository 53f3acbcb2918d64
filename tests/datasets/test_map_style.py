import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from robostream.datasets.map_style import LeRobotDataset
from robostream.format.metadata import load_metadata
from robostream.synth import read_marker
from robostream.video.decoder import BACKENDS
from robostream.video.options import DecodeOptions
from tests.helpers import data_column


def _marker(frame: torch.Tensor) -> tuple[int, int, int]:
    if frame.dtype != torch.uint8:
        frame = (frame * 255).round().to(torch.uint8)
    return read_marker(frame.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_frame_of_every_camera_is_the_right_one(any_root, backend):
    dataset = LeRobotDataset(root=any_root, video_backend=backend, return_uint8=True)
    meta = dataset.meta
    assert len(dataset) == int(meta.episodes.length.sum())
    for position in range(len(dataset)):
        sample = dataset[position]
        episode, frame = int(sample["episode_index"]), int(sample["frame_index"])
        assert int(sample["index"]) == position
        for camera, key in enumerate(meta.video_keys):
            assert _marker(sample[key]) == (episode, frame, camera), (position, key)


def test_sample_contract_keys_dtypes_shapes(av1_root):
    dataset = LeRobotDataset(root=av1_root)
    sample = dataset[3]
    meta = dataset.meta
    state_dim = meta.info.features["observation.state"]["shape"][0]
    assert sample["observation.state"].dtype == torch.float32 and sample["observation.state"].shape == (state_dim,)
    assert sample["action"].shape == (state_dim,)
    assert sample["timestamp"].dtype == torch.float32 and sample["timestamp"].shape == ()
    for key in ("frame_index", "episode_index", "index", "task_index"):
        assert sample[key].dtype == torch.int64 and sample[key].shape == (), key
    for key in meta.video_keys:
        h, w, c = meta.info.features[key]["shape"]
        frame = sample[key]
        assert frame.dtype == torch.float32 and frame.shape == (c, h, w)
        assert 0.0 <= float(frame.min()) and float(frame.max()) <= 1.0
    assert sample["task"] == meta.task(int(sample["task_index"]))
    assert set(sample) == set(meta.info.features) | {"task"}


def test_delta_windows_match_lerobot_semantics_including_wide_ones(av1_root):
    meta = load_metadata(av1_root)
    cam = meta.video_keys[1]
    fps = meta.fps
    wide = [k / fps for k in range(-130, 131, 13)]  # 261 frames wide: wider than any episode and than 100 frames
    deltas = {cam: [-2 / fps, 0.0, 3 / fps], "action": wide, "observation.state": [0.0]}
    dataset = LeRobotDataset(root=av1_root, delta_timestamps=deltas, return_uint8=True)
    actions = data_column(av1_root, "action")
    for position in range(len(dataset)):
        sample = dataset[position]
        episode, index = int(sample["episode_index"]), int(sample["index"])
        row = meta.episodes.row_of(episode)
        lo, hi = int(meta.episodes.from_index[row]), int(meta.episodes.to_index[row])
        queries = np.clip(index + np.array([-2, 0, 3]), lo, hi - 1)
        assert sample[cam].shape[0] == 3
        assert [_marker(f)[:2] for f in sample[cam]] == [(episode, q - lo) for q in queries]
        assert sample[f"{cam}_is_pad"].tolist() == [not lo <= index + o < hi for o in (-2, 0, 3)]
        action_queries = np.clip(index + np.arange(-130, 131, 13), lo, hi - 1)
        expected = torch.from_numpy(actions[action_queries])
        torch.testing.assert_close(sample["action"], expected)
        assert sample["action_is_pad"].sum() > 0
        assert sample["observation.state"].shape == (1, meta.info.features["observation.state"]["shape"][0])
        assert sample[meta.video_keys[0]].shape == (3, 64, 64)  # no deltas: single frame


def test_episode_subset_keeps_global_indices(av1_root):
    meta = load_metadata(av1_root)
    dataset = LeRobotDataset(root=av1_root, episodes=[5, 2], return_uint8=True)
    lengths = {e: int(meta.episodes.length[meta.episodes.row_of(e)]) for e in (2, 5)}
    assert len(dataset) == lengths[2] + lengths[5]
    first, later = dataset[0], dataset[lengths[2]]
    assert int(first["episode_index"]) == 2 and int(first["index"]) == int(meta.episodes.from_index[2])
    assert int(later["episode_index"]) == 5 and int(later["frame_index"]) == 0
    assert _marker(later[meta.video_keys[0]]) == (5, 0, 0)
    assert {int(dataset[i]["episode_index"]) for i in range(len(dataset))} == {2, 5}
    with pytest.raises(ValueError, match=r"episodes=\[99\]"):
        LeRobotDataset(root=av1_root, episodes=[99])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dataloader_worker_processes_and_transforms(av1_root, backend):
    dataset = LeRobotDataset(root=av1_root, image_transforms=lambda x: x.flip(-1), video_backend=backend)
    dataset[0]  # the parent opens decoders first: workers must not reuse them across the fork
    loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
    seen = []
    for batch in loader:
        assert batch["observation.images.cam0"].shape[1:] == (3, 64, 64)
        for frame, episode, frame_index in zip(
            batch["observation.images.cam0"], batch["episode_index"], batch["frame_index"]
        ):
            assert _marker(frame.flip(-1)) == (int(episode), int(frame_index), 0)
        seen.extend(batch["index"].tolist())
        assert len(batch["task"]) == len(batch["index"])
    assert sorted(seen) == list(range(len(dataset)))


def test_decoder_cache_stats_reflect_reads(av1_root):
    dataset = LeRobotDataset(root=av1_root, decoding=DecodeOptions(decoders_kept=8))
    for position in range(10):
        dataset[position]
    stats = dataset.video_decoder_cache_stats()
    assert stats["hits"] + stats["misses"] == 10 * len(dataset.meta.video_keys)
    assert stats["misses"] <= 4 and stats["size"] == stats["misses"]


@pytest.mark.parametrize(
    "options",
    [
        dict(return_uint8=True),
        dict(delta_timestamps={"observation.images.cam0": [-0.1, 0.0, 0.05], "action": [0.0, 0.05]}),
    ],
)
def test_a_batch_of_indices_equals_the_samples_one_by_one(av1_root, options):
    """__getitems__ (what torch's DataLoader calls per batch) decodes a batch's frames together, same samples."""
    dataset = LeRobotDataset(root=av1_root, **options)
    positions = [len(dataset) - 1, 0, 5, 5, 40, 23, 24, 1, 100]
    together = dataset.__getitems__(positions)
    for position, sample in zip(positions, together):
        alone = dataset[position]
        assert list(sample) == list(alone)
        for key, value in alone.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == sample[key].dtype and torch.equal(value, sample[key]), key
            else:
                assert value == sample[key], key
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1)))
    assert torch.equal(batch["index"], torch.arange(4))
