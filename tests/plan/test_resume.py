from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.layout import auto_canonical_streams
from robostream.plan.resume import (
    emitted_by_role,
    level_fill_counts,
    rotation_after,
    round_robin_counts,
    samples_per_worker,
    sequential_counts,
)


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


def test_samples_per_worker_counts_round_robin_batches():
    assert samples_per_worker(5, [100, 100], 4) == [12, 8]
    assert samples_per_worker(5, [10, 10], 4) == [10, 8]  # a last partial batch
    assert samples_per_worker(0, [10, 10, 10], 4) == [0, 0, 0]
    assert samples_per_worker(6, [4, 12], 4) == [4, 12]  # worker 0 runs out after one batch, then only worker 1


def test_auto_canonical_count_is_a_multiple_of_the_layout_and_of_12():
    assert auto_canonical_streams(4) == 12 and auto_canonical_streams(16) == 48 and auto_canonical_streams(5) == 60


def test_emitted_by_role_follows_the_cyclic_batches_of_every_rank():
    # 2 ranks x 2 workers, batch 4: 5 batches per rank come from workers 0, 1, 0, 1, 0.
    assert emitted_by_role(5, [100] * 4, 4, 2, 2, rotation=0) == [12, 8, 12, 8]
    # After a same-layout resume with rotation 1, the DataLoader's worker 0 plays role 1 (rank 0) and 3 (rank 1).
    assert emitted_by_role(5, [100] * 4, 4, 2, 2, rotation=1) == [8, 12, 8, 12]
    # A worker whose quota runs out is skipped; a last partial batch counts what it held.
    assert emitted_by_role(6, [4, 12], 4, 1, 2, rotation=0) == [4, 12]
    assert emitted_by_role(0, [3, 3, 3], 4, 3, 1, rotation=0) == [0, 0, 0]


def test_rotation_after_continues_the_loader_cycle_past_a_worker_that_ran_out():
    """Workers with 6, 9, 9 batches: after 19 batches worker 0 has run out and worker 1 gave the 19th, so the
    next is worker 2 (not 19 % 3 = 1): a resumed loader's worker 0 must play role 2. Found by the per_stream
    property test (tests/plan/test_epoch.py), where a same-layout resume reordered the last batches."""
    assert rotation_after([6, 9, 9], 19, 0) == 2
    assert rotation_after([6, 9, 9], 18, 0) == 1  # worker 0 just ran out: worker 1 is next
    assert rotation_after([3, 3, 3], 4, 0) == 1 and rotation_after([3, 3, 3], 4, 2) == 0  # no one ran out: b % W
    assert rotation_after([2, 0, 5], 3, 1) == 0  # workers 0 and 1 out: worker 2, role 0, serves all that is left
