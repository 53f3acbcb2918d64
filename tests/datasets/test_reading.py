"""One Reading per dataset: a plain dataset and a mixture of one source are read the same way (the same batches,
the same decoders opened, the same frames decoded and bytes read), in process and through DataLoader workers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import fsspec
import pytest
import torch

from robostream import Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.synth import generate
from tests.helpers import SMALL_H264_CONFIG

CONFIG = dataclasses.replace(SMALL_H264_CONFIG, seed=3)
WINDOWS = {"observation.state": [-0.1, 0.0], "observation.images.cam0": [-0.1, 0.0]}
# Counts that do not depend on thread timing (waits and in-flight peaks do).
COUNTED = ("frames_decoded", "frames_delivered", "peak_piece_frames", "bytes_read", "read_ahead_errors")


@pytest.fixture(scope="module")
def remote_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The dataset in fsspec's memory filesystem: a remote root (ranged reads, byte counters) that forked
    DataLoader workers inherit."""
    root = generate(tmp_path_factory.mktemp("reading") / "d", CONFIG)
    fs = fsspec.filesystem("memory")
    for path in Path(root).rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/reading-test/{path.relative_to(root)}", path.read_bytes())
    return "memory://reading-test"


def _read(dataset: StreamingLeRobotDataset, workers: int) -> list[dict]:
    """A whole epoch: counts taken after a loader stopped early would depend on how far its workers ran ahead."""
    loader = StreamingDataLoader(dataset, batch_size=5, num_workers=workers)
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()} for batch in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_dataset_reads_as_a_mixture_of_one_source(remote_root, workers):
    common = dict(
        delta_timestamps=WINDOWS, return_uint8=True, seed=4, streams=StreamOptions(pool_size=2, canonical_streams=4)
    )
    plain = StreamingLeRobotDataset(root=remote_root, **common)
    mixture = StreamingLeRobotDataset(mixture=Mixture(sources=[Source(root=remote_root)]), **common)
    got_plain, got_mixture = _read(plain, workers), _read(mixture, workers)
    assert len(got_plain) == len(got_mixture) > 1
    for a, b in zip(got_plain, got_mixture):
        assert b.pop("dataset_index").eq(0).all()  # the mixture's one extra key
        assert list(a) == list(b)
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == b[key].dtype and torch.equal(value, b[key]), key
            else:
                assert value == b[key], key
    plain_counts, mixture_counts = plain.frame_counts(), mixture.frame_counts()
    assert plain_counts["frames_decoded"] > 0 and plain_counts["bytes_read"] > 0
    assert {k: plain_counts[k] for k in COUNTED} == {k: mixture_counts[k] for k in COUNTED}
    if workers == 0:  # the decoders live in this process: the same files opened, as often
        plain_decoders, mixture_decoders = plain.reading.decoders.stats(), mixture.reading.decoders.stats()
        assert plain_decoders["misses"] > 0
        assert {k: plain_decoders[k] for k in ("hits", "misses", "evictions")} == {
            k: mixture_decoders[k] for k in ("hits", "misses", "evictions")
        }


def test_every_source_reads_through_the_datasets_one_reading(remote_root):
    mixture = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=remote_root), Source(root=remote_root)]), seed=1
    )
    reading = mixture.reading
    assert [storage for storage in reading.storages] == [source.meta.data_storage for source in mixture.sources]
    for source in mixture.sources:
        assert source.cameras.cache is reading.decoders
        assert source.frames.reading is reading
    # one set of fetched blocks for both (SharedReading): fetched bytes grow with what is read, not the sources
    assert reading.storages[0].blocks is reading.storages[1].blocks
