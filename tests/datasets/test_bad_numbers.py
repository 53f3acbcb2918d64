"""Numbers that make no epoch, or one no plan can hold, are refused at construction naming the argument (issue 32):
all-zero weights (which failed three ways later: "cannot split 0 samples", 0 batches silently, StopIteration),
repeat/choose/epoch_size beyond what a plan holds (OverflowError, MemoryError), a loader's batch_size <= 0; and a
mixture file's read_options given as a mapping are ReadOptions fields (an AttributeError at the first read)."""

from __future__ import annotations

import pytest

from robostream import Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset
from robostream.plan.mixture import MAX_EPOCH_UNITS
from robostream.storage.options import ReadOptions
from robostream.storage.retry import RetryPolicy


def _mixture(root, weights, batching="random", epoch_size=None):
    """Two selections of one dataset (the features match), weighted by `weights`."""
    planned = {} if batching == "random" else {"batch_size": 2}
    sources = [Source(root=root, episodes=[0, 1, 2], **weights[0]), Source(root=root, episodes=[3, 4], **weights[1])]
    return StreamingLeRobotDataset(
        mixture=Mixture(sources=sources, batching=batching, epoch_size=epoch_size, **planned)
    )


@pytest.mark.parametrize("batching", ["random", "per_stream", "stratified"])
@pytest.mark.parametrize("weight", [{"repeat": 0}, {"choose": 0}, {"proportion": 0}])
def test_weights_that_give_no_sample_are_refused_naming_them(av1_root, batching, weight):
    name, value = next(iter(weight.items()))
    with pytest.raises(ValueError, match=rf"the weights \[{name}=0, {name}=0\] give an epoch no sample"):
        _mixture(av1_root, [weight, weight], batching)


@pytest.mark.parametrize(
    "weights, epoch_size, named",
    [
        ([{"repeat": 1e308}, {}], None, r"source 0: repeat=1e\+308 asks for ~10\^309 samples per epoch"),
        ([{}, {"choose": 10**18}], None, r"source 1: choose=1000000000000000000 asks for ~10\^18 samples"),
        ([{"proportion": 1}, {"proportion": 1}], 10**18, r"source 1: epoch_size=1000000000000000000 \(proportion=1\)"),
    ],
)
def test_an_epoch_beyond_what_a_plan_holds_is_refused_naming_the_argument(av1_root, weights, epoch_size, named):
    with pytest.raises(ValueError, match=f"{named}.* more than {MAX_EPOCH_UNITS} "):
        _mixture(av1_root, weights, epoch_size=epoch_size)


def test_many_passes_within_the_bound_still_plan(av1_root):
    dataset = _mixture(av1_root, [{"repeat": 1000}, {"choose": 3}])
    assert dataset.samples_per_source[1] == 3 and len(dataset.epoch_units()) >= 3000


def test_read_options_as_a_mapping_are_its_fields(av1_root):
    source = Source(root=av1_root, read_options={"read_buffer": "64mb", "retry": {"max_attempts": 2}})
    assert source.read_options == ReadOptions(read_buffer="64mb", retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ValueError, match=r"read_options: unknown keys \['cache_size'\]; ReadOptions takes"):
        Source(root=av1_root, read_options={"cache_size": 3})
    with pytest.raises(ValueError, match=r"read_options\['retry'\]: unknown keys \['attempts'\]; RetryPolicy takes"):
        Source(root=av1_root, read_options={"retry": {"attempts": 2}})
    with pytest.raises(TypeError, match="read_options: expected a ReadOptions or a mapping of its fields, got 3"):
        Source(root=av1_root, read_options=3)


@pytest.mark.parametrize("batch_size", [0, -3, 2.0])
def test_a_loader_batch_size_below_one_is_refused(av1_root, batch_size):
    """batch 0 made every epoch empty (a training loop over epochs spun forever)."""
    with pytest.raises(ValueError, match="StreamingDataLoader batch_size: "):
        StreamingDataLoader(StreamingLeRobotDataset(root=av1_root), batch_size=batch_size)
