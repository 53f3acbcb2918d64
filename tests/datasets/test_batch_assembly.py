"""Batches assembled whole by the streaming dataset (the loader's fast path) are exactly torch's collate of the
samples per-sample iteration gives: same keys in the same order, dtypes, shapes, values and layout, in real
DataLoader worker processes, with windows, padding, float and uint8 cameras, parquet images, a short last batch and
drop_last."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.datasets.cameras import FRAMES_PER_CALL
from robostream.writer.v30 import DatasetWriter

WINDOWS = {
    "observation.images.cam0": [-0.1, 0.0, 0.05],
    "action": [0.0, 0.05, 0.1, 0.15],
    "observation.state": [-0.05, 0.0],
}


def assert_same_batches(fast: list, reference: list) -> None:
    assert len(fast) == len(reference) > 0
    for a, b in zip(fast, reference):
        assert list(a) == list(b)  # key order too
        for key in a:
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
                assert a[key].is_contiguous(), key
                assert torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


def both_paths(dataset: StreamingLeRobotDataset, **loader_kwargs) -> tuple[list, list]:
    fast = list(StreamingDataLoader(dataset, **loader_kwargs))
    reference = list(StreamingDataLoader(dataset, collate_fn=default_collate, **loader_kwargs))
    return fast, reference


@pytest.mark.parametrize(
    "options",
    [
        dict(return_uint8=True),
        dict(return_uint8=False, delta_timestamps=WINDOWS),
        dict(return_uint8=True, delta_timestamps=WINDOWS, episodes=[1, 4, 6], shuffle=False),
    ],
    ids=["uint8-single", "float-windows", "uint8-windows-subset-ordered"],
)
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_torch_collate_of_the_samples(av1_root, options, workers):
    dataset = StreamingLeRobotDataset(root=av1_root, **options)
    fast, reference = both_paths(dataset, batch_size=5, num_workers=workers)
    assert_same_batches(fast, reference)
    # Every sample once (short last batches kept).
    assert sorted(i for b in fast for i in b["index"].tolist()) == sorted(s["index"].item() for s in dataset)


def test_a_batch_of_one_pieces_run_longer_than_a_call_holds_decodes_in_calls_of_frames_per_call(av1_root):
    """An ordered pass reads one piece at a time: a batch of its 24 samples asks one run of 24 frames per camera,
    decoded forward in calls of at most FRAMES_PER_CALL (16 + 8) so the decoder's output stays small (3 x 480x640
    would be 59 MB per camera in one call of 64), with the frames of the per-sample path."""
    options = dict(return_uint8=True, episodes=[2], shuffle=False, streams=StreamOptions(canonical_streams=1))
    dataset = StreamingLeRobotDataset(root=av1_root, **options)
    fast = list(StreamingDataLoader(dataset, batch_size=24))
    assert len(fast) == 1 and FRAMES_PER_CALL == 16
    assert dataset.reading.decoders.stats()["decoder_calls"] == 2 * len(dataset.meta.video_keys)
    reference = list(
        StreamingDataLoader(
            StreamingLeRobotDataset(root=av1_root, **options), batch_size=24, collate_fn=default_collate
        )
    )
    assert_same_batches(fast, reference)


def test_the_passs_first_batch_decodes_its_pieces_to_the_next_keyframe_only(av1_root):
    """The first batch of a pass finds every live piece new: each decodes its samples in the batch up to the next
    keyframe (info.json's GOP, 2 here), not decode_ahead samples of every piece before the first batch; later
    batches decode the look-ahead, and the pass is the per-sample path's."""
    dataset = StreamingLeRobotDataset(root=av1_root, return_uint8=True, seed=1)
    source = dataset.sources[0].frames
    assert dataset.meta.info.cameras_gop == 2 and source.first_run == 2 and source.decode_ahead == 16
    batches = iter(StreamingDataLoader(dataset, batch_size=4))
    first = next(batches)
    decoded = dataset.frame_counts()["frames_decoded"]
    # at most 2 frames per camera and sample (a full look-ahead: 16 per camera and piece)
    assert decoded <= 2 * len(dataset.meta.video_keys) * len(first["index"]), decoded
    rest = list(batches)
    assert dataset.frame_counts()["frames_decoded"] - decoded > 16  # later runs: the look-ahead
    reference = list(
        StreamingDataLoader(
            StreamingLeRobotDataset(root=av1_root, return_uint8=True, seed=1), batch_size=4, collate_fn=default_collate
        )
    )
    assert_same_batches([first, *rest], reference)


def test_drop_last_drops_each_workers_short_batch(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, return_uint8=True)
    fast, reference = both_paths(dataset, batch_size=7, num_workers=2, drop_last=True)
    assert_same_batches(fast, reference)
    assert all(len(b["index"]) == 7 for b in fast)
    assert sum(len(b["index"]) for b in fast) < sum(1 for _ in dataset)  # the short batches were there to drop


def test_loader_keeps_the_batching_it_was_given(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, return_uint8=True)
    loader = StreamingDataLoader(dataset, batch_size=6, num_workers=2, drop_last=True)
    assert loader.batch_size == 6 and loader.drop_last is True
    # The dataset yields samples again once the loader's iterator is made: plain iteration is per sample.
    iter(loader)
    assert isinstance(next(iter(dataset))["index"], torch.Tensor) and next(iter(dataset))["index"].dim() == 0


def test_on_batch_hook_runs_in_the_worker_with_the_batch(av1_root):
    dataset = StreamingLeRobotDataset(root=av1_root, return_uint8=True)
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2, on_batch=_mark_batch)
    batches = list(loader)
    assert all(b["produced_s"].shape == (len(b["index"]),) and (b["produced_s"] > 0).all() for b in batches)
    assert {int(b["worker_pid"]) for b in batches} == {int(b["worker_pid"]) for b in batches[:2]}
    assert len({int(b["worker_pid"]) for b in batches}) == 2


def _mark_batch(batch, seconds):
    import os

    batch["produced_s"] = torch.full((len(batch["index"]),), seconds, dtype=torch.float64)
    batch["worker_pid"] = torch.tensor(os.getpid())


def test_per_sample_paths_stay_available(av1_root):
    """image_transforms run per sample, and a caller's collate_fn gets samples: both take the per-sample path."""
    transformed = StreamingLeRobotDataset(root=av1_root, image_transforms=lambda x: x * 2)
    assert not transformed.assembles_batches
    batch = next(iter(StreamingDataLoader(transformed, batch_size=3, num_workers=1)))
    assert batch["observation.images.cam0"].shape == (3, 3, 64, 64)
    with pytest.raises(ValueError, match="on_batch"):
        StreamingDataLoader(transformed, batch_size=3, on_batch=_mark_batch)
    seen = []
    plain = StreamingLeRobotDataset(root=av1_root, return_uint8=True)
    next(iter(StreamingDataLoader(plain, batch_size=3, collate_fn=lambda samples: seen.extend(samples) or 0)))
    assert len(seen) == 3 and seen[0]["index"].dim() == 0


@pytest.fixture(scope="module")
def mixed_root(tmp_path_factory) -> Path:
    """A camera as video, another as parquet PNG images, and a string column."""
    rng = np.random.default_rng(7)
    features = {
        "observation.images.front": {"dtype": "video", "shape": [48, 64, 3], "names": None},
        "observation.images.wrist": {"dtype": "image", "shape": [24, 32, 3], "names": None},
        "observation.state": {"dtype": "float32", "shape": [3], "names": None},
        "language": {"dtype": "string", "shape": [1], "names": None},
    }
    root = tmp_path_factory.mktemp("mixed") / "ds"
    with DatasetWriter(root, 10, features, codec="av1", gop=2) as writer:
        for length in (9, 6, 11):
            writer.add_episode(
                {
                    "observation.images.wrist": rng.integers(0, 255, (length, 24, 32, 3), dtype=np.uint8),
                    "observation.state": rng.random((length, 3), dtype=np.float32),
                    "language": np.array([f"step {i}" for i in range(length)]),
                },
                task="stack",
                videos={"observation.images.front": rng.integers(0, 255, (length, 48, 64, 3), dtype=np.uint8)},
            )
    return root


@pytest.mark.parametrize("deltas", [None, {"observation.images.wrist": [-0.1, 0.0], "observation.images.front": [0.0]}])
def test_parquet_images_strings_and_one_frame_windows(mixed_root, deltas):
    dataset = StreamingLeRobotDataset(root=mixed_root, delta_timestamps=deltas)
    fast, reference = both_paths(dataset, batch_size=4, num_workers=1)
    assert_same_batches(fast, reference)
    assert isinstance(fast[0]["language"][0], str)
