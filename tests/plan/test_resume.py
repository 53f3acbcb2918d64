import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.layout import auto_canonical_streams, owned_streams
from robostream.plan.resume import (consumer_quotas, level_fill_counts, round_robin_counts, samples_per_worker,
                                    sequential_counts, stream_offsets_after)


def _simulate_round_robin(remaining, picks):
    taken = [0] * len(remaining)
    while picks and any(t < r for t, r in zip(taken, remaining)):
        for i, r in enumerate(remaining):
            if picks and taken[i] < r:
                taken[i] += 1
                picks -= 1
    return taken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=10), st.integers(0, 500))
def test_round_robin_counts_match_a_simulation(remaining, picks):
    assert round_robin_counts(remaining, picks).tolist() == _simulate_round_robin(remaining, picks)


def _simulate_level_fill(offsets, lengths, picks):
    offsets, taken = list(offsets), [0] * len(offsets)
    for _ in range(picks):
        active = [i for i in range(len(offsets)) if offsets[i] < lengths[i]]
        if not active:
            break
        i = min(active, key=lambda j: (offsets[j], j))
        offsets[i] += 1
        taken[i] += 1
    return taken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=8), st.integers(0, 300))
def test_level_fill_counts_match_a_simulation(pairs, picks):
    offsets = [min(a, b) for a, b in pairs]
    lengths = [max(a, b) for a, b in pairs]
    assert level_fill_counts(offsets, lengths, picks).tolist() == _simulate_level_fill(offsets, lengths, picks)
    # From equal offsets it is a round-robin that skips finished streams.
    assert level_fill_counts([0] * len(lengths), lengths, picks).tolist() == _simulate_round_robin(lengths, picks)


def test_sequential_counts():
    assert sequential_counts([3, 2, 4], 4).tolist() == [3, 1, 0]
    assert sequential_counts([3, 2, 4], 100).tolist() == [3, 2, 4]


def test_quotas_equalise_ranks_not_workers():
    remaining = [5, 4, 5, 3]  # 2 ranks x 1 worker: rank 0 owns streams 0, 2 (10), rank 1 streams 1, 3 (7)
    assert consumer_quotas(remaining, 2, 1, "pad") == [10, 10]
    assert consumer_quotas(remaining, 2, 1, "drop") == [7, 7]
    # 1 rank x 2 workers: nothing to equalise, every sample once
    assert consumer_quotas(remaining, 1, 2, "drop") == [10, 7]
    # 2 ranks x 2 workers: roles 0, 1 (rank 0) and 2, 3 (rank 1); worker w gets the same quota on both ranks
    assert consumer_quotas([5, 4, 6, 3, 1, 1, 1, 1], 2, 2, "drop") == [6, 4, 6, 4]
    assert consumer_quotas([5, 4, 6, 3, 1, 1, 1, 1], 2, 2, "pad") == [7, 5, 7, 5]
    with pytest.raises(ValueError, match="uneven"):
        consumer_quotas(remaining, 2, 1, "sometimes")


def test_samples_per_worker_counts_round_robin_batches():
    assert samples_per_worker(5, [100, 100], 4) == [12, 8]
    assert samples_per_worker(5, [10, 10], 4) == [10, 8]  # a last partial batch
    assert samples_per_worker(0, [10, 10, 10], 4) == [0, 0, 0]
    assert samples_per_worker(6, [4, 12], 4) == [4, 12]  # worker 0 runs out after one batch, then only worker 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda k: st.tuples(st.just(k), st.integers(1, 4))), st.integers(0, 10 ** 6))
def test_offsets_after_emission_account_for_every_sample(layout, seed):
    consumers, per = layout
    canonical = consumers * per
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 30, size=canonical)
    start = [int(rng.integers(0, n + 1)) for n in lengths]
    emitted = [int(rng.integers(0, 60)) for _ in range(consumers)]
    offsets = stream_offsets_after(start, lengths, consumers, emitted)
    assert all(s <= o <= n for s, o, n in zip(start, offsets, lengths))
    for k in range(consumers):
        streams = owned_streams(k, consumers, canonical)
        gained = sum(offsets[s] - start[s] for s in streams)
        assert gained == min(emitted[k], sum(lengths[s] - start[s] for s in streams))


def test_layouts_must_divide_the_canonical_count():
    assert auto_canonical_streams(4) == 12 and auto_canonical_streams(16) == 48
    assert owned_streams(1, 4, 12) == [1, 5, 9]
    with pytest.raises(ValueError, match="5 consumers .* 12 canonical streams"):
        owned_streams(0, 5, 12)
