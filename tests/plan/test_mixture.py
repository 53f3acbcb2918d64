"""plan/mixture.py: per-source epoch counts, partial passes and the lane batchings' matrices (pure functions)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.mixture import (
    Weight,
    epoch_units,
    lane_batch_counts,
    partial_pass,
    per_stream_counts,
    samples_per_source,
    stratified_counts,
)
from robostream.plan.order import PURPOSE_MIXTURE, rng_for


def test_proportions_are_exact_floor_plus_largest_remainder():
    weights = [Weight(proportion=p) for p in (1, 1, 1)]
    assert samples_per_source([10, 10, 10], weights, 100) == [34, 33, 33]  # ties: lower source first
    assert samples_per_source([5, 7], [Weight(proportion=0.7), Weight(proportion=0.3)], 11) == [8, 3]
    assert samples_per_source([5, 7], [Weight(proportion=2), Weight(proportion=1)], None) == [8, 4]  # E = 12
    for size in (1, 7, 999, 10**7 + 3):
        assert sum(samples_per_source([1, 1, 1], [Weight(proportion=p) for p in (0.1, 0.2, 0.7)], size)) == size


def test_absolute_weights_and_the_errors():
    assert samples_per_source([10, 20, 30], [Weight(repeat=1.5), Weight(choose=7), Weight()], None) == [15, 7, 30]
    with pytest.raises(ValueError, match="relative weights .* cannot be mixed"):
        samples_per_source([1, 1], [Weight(proportion=1), Weight(repeat=1)], None)
    with pytest.raises(ValueError, match="epoch_size applies to proportion"):
        samples_per_source([1, 1], [Weight(repeat=1), Weight()], 5)
    with pytest.raises(ValueError, match="at most one of proportion, repeat or choose"):
        Weight(proportion=1, choose=3)
    with pytest.raises(ValueError, match="choose=2.5"):
        Weight(choose=2.5)
    with pytest.raises(ValueError, match="must not all be 0"):
        samples_per_source([1, 1], [Weight(proportion=0), Weight(proportion=0)], 3)


@pytest.mark.parametrize("count", [1, 9, 10, 11, 37, 59])
def test_partial_pass_takes_whole_episodes_then_one_run_without_repeats(count):
    lengths = [10, 5, 20, 15, 10]
    units = partial_pass(lengths, count, np.random.default_rng(count))
    frames = [(p, f) for p, a, b in units for f in range(a, b)]
    assert len(frames) == len(set(frames)) == count
    cut = [(p, a, b) for p, a, b in units if b - a < lengths[p]]
    assert len(cut) <= 1 and (not cut or units[-1] == cut[0])  # whole episodes first, one run last
    assert len({p for p, _, _ in units}) == len(units)


def test_epoch_units_full_passes_balanced_and_fixed():
    lengths = [[4, 6], [3, 3, 3]]
    units = epoch_units(lengths, [25, 4], seed=1, epoch=0, sampling_method="balanced")
    per_source = [int(units.length[units.source == s].sum()) for s in (0, 1)]
    assert per_source == [25, 4]
    whole = [(int(e), int(n)) for e, n, s in zip(units.episode, units.length, units.source) if s == 0][:4]
    assert sorted(whole) == [(0, 4), (0, 4), (1, 6), (1, 6)]  # two full passes, then the partial pass
    assert 1 <= int((units.source == 1).sum()) <= 2
    fixed = [epoch_units(lengths, [5, 4], seed=1, epoch=e, sampling_method="fixed") for e in (0, 1)]
    assert all((a == b).all() for a, b in zip(vars(fixed[0]).values(), vars(fixed[1]).values()))
    draws = {
        tuple(np.concatenate([u.episode, u.first]).tolist())
        for u in (epoch_units(lengths, [5, 4], seed=1, epoch=e, sampling_method="balanced") for e in range(8))
    }
    assert len(draws) > 1  # balanced: a new subset across epochs
    assert rng_for(1, 0, PURPOSE_MIXTURE, 0).integers(1 << 30) != rng_for(1, 0, PURPOSE_MIXTURE, 1).integers(1 << 30)


quotas_lists = st.lists(st.integers(0, 40), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(quotas=quotas_lists, batch_size=st.integers(1, 9), shuffle=st.booleans(), worker=st.integers(0, 3))
def test_per_stream_rows_are_one_hot_whole_but_each_sources_last(quotas, batch_size, shuffle, worker):
    """per_stream's matrix: one source per batch, ceil(q / B) batches of each, all whole but the source's last,
    which holds the rest of its quota; unshuffled, sources one after the other; the order a pure function of
    (seed, epoch, worker, generation)."""
    draw = dict(seed=5, epoch=1, worker=worker, generation=0, shuffle=shuffle)
    counts = per_stream_counts(quotas, batch_size, **draw)
    assert counts.shape == (sum(-(-q // batch_size) for q in quotas), len(quotas))
    assert ((counts > 0).sum(axis=1) == 1).all() and (counts.sum(axis=0) == quotas).all()
    sources = counts.argmax(axis=1)
    for s in range(len(quotas)):
        mine = counts[sources == s, s]
        assert (mine[:-1] == batch_size).all() and (len(mine) == 0 or 1 <= mine[-1] <= batch_size)
    if not shuffle:
        assert (np.diff(sources) >= 0).all()
    assert (per_stream_counts(quotas, batch_size, **draw) == counts).all()
    assert (lane_batch_counts("per_stream", quotas, batch_size, **draw) == counts).all()


@settings(max_examples=300, deadline=None)
@given(quotas=quotas_lists, batch_size=st.integers(1, 9))
def test_stratified_rows_hold_each_sources_share(quotas, batch_size):
    """stratified's matrix: every batch but the last holds B samples, each source within about a sample of its
    share, and each source's count over the batches is its quota."""
    counts = stratified_counts(quotas, batch_size)
    assert counts.shape == (-(-sum(quotas) // batch_size), len(quotas))
    assert (counts.sum(axis=0) == quotas).all() and (counts[:-1].sum(axis=1) == batch_size).all()
    if sum(quotas):
        shares = np.asarray(quotas) * batch_size / sum(quotas)
        assert (np.abs(counts[:-1] - shares) < 1 + 0.05).all()
    draw = dict(seed=5, epoch=1, worker=0, generation=0, shuffle=True)
    assert (lane_batch_counts("stratified", quotas, batch_size, **draw) == counts).all()
