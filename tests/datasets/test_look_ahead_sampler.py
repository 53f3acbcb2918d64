"""LookAheadBatchSampler: torch's batches, each naming the batch `look_ahead` places later (what the worker that
gets it will be asked for next under round-robin dispatch)."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

from robostream import LookAheadBatchSampler


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("look_ahead", [1, 2, 3])
@pytest.mark.parametrize("depth", [0, 1, 2])
def test_the_batches_are_torchs_and_each_names_its_workers_next_ones(drop_last, look_ahead, depth):
    def sampler():
        return RandomSampler(range(70), generator=torch.Generator().manual_seed(5))

    expected = list(BatchSampler(sampler(), batch_size=8, drop_last=drop_last))
    batches = list(
        LookAheadBatchSampler(sampler(), batch_size=8, drop_last=drop_last, look_ahead=look_ahead, depth=depth)
    )
    assert [list(b) for b in batches] == expected
    assert len(LookAheadBatchSampler(sampler(), batch_size=8, drop_last=drop_last)) == len(expected)
    for i, batch in enumerate(batches):
        later = [expected[j] for j in range(i + look_ahead, len(expected), look_ahead)][:depth]
        assert batch.ahead == later
    again = pickle.loads(pickle.dumps(batches[0]))  # what a DataLoader worker receives
    assert list(again) == list(batches[0]) and again.ahead == batches[0].ahead


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="batch_size=0"):
        LookAheadBatchSampler(range(4), batch_size=0)
    with pytest.raises(ValueError, match="depth=-1"):
        LookAheadBatchSampler(range(4), batch_size=2, depth=-1)
