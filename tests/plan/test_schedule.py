import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.order import rng_for
from robostream.plan.schedule import (
    deal_pieces,
    piece_sample_order,
    pool_schedule,
    sample_jitter,
    take,
    window_stride,
)


def _flatten(chunks):
    chunks = list(chunks)
    if not chunks:
        return [], []
    return np.concatenate([c[0] for c in chunks]).tolist(), np.concatenate([c[1] for c in chunks]).tolist()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 80), min_size=1, max_size=25), st.integers(1, 9), st.integers(0, 1000), st.integers(1, 300)
)
def test_pool_schedule_emits_every_sample_once_in_piece_order(lengths, pool, seed, chunk):
    pieces, positions = _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed), chunk=chunk))
    for piece, length in enumerate(lengths):
        assert [p for q, p in zip(pieces, positions) if q == piece] == list(range(length))
    # The chunk size is an implementation detail: the schedule must not depend on it (resume relies on this).
    assert (pieces, positions) == _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=30), st.integers(1, 9), st.integers(0, 1000))
def test_pool_never_holds_more_than_pool_size_pieces(lengths, pool, seed):
    pieces, positions = _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed), chunk=37))
    live = set()
    for piece, position in zip(pieces, positions):
        live.add(piece)
        assert len(live) <= pool
        if position == lengths[piece] - 1:
            live.remove(piece)


def test_pool_mixes_pieces_and_depends_on_seed():
    lengths = [100] * 8
    a, _ = _flatten(pool_schedule(lengths, 8, rng_for(0, 0, 2)))
    b, _ = _flatten(pool_schedule(lengths, 8, rng_for(0, 1, 2)))
    assert a != b
    assert len(set(a[:32])) >= 6  # a window of 32 samples spans most live pieces
    chronological, _ = _flatten(pool_schedule(lengths, 8, None))
    assert chronological == sorted(chronological)


def test_pool_schedule_edge_cases():
    assert _flatten(pool_schedule([], 4, rng_for(0, 0, 2))) == ([], [])
    assert _flatten(pool_schedule([0, 0], 4, rng_for(0, 0, 2))) == ([], [])
    assert _flatten(pool_schedule([0, 5, 0], 4, rng_for(0, 0, 2))) == ([1] * 5, list(range(5)))
    pieces, _ = _flatten(pool_schedule([3, 4], 1, rng_for(0, 0, 2)))
    assert pieces == [0, 0, 0, 1, 1, 1, 1]  # a pool of one is chronological


def test_deal_pieces_fills_the_least_loaded_slot_in_list_order():
    assert deal_pieces([5, 3, 0, 2, 4, 1], 2).tolist() == [0, 1, -1, 1, 0, 1]
    assert deal_pieces([7, 7], 4).tolist() == [0, 1]  # ties: lowest slot
    assert deal_pieces([], 3).tolist() == []


def test_sample_jitter_is_uniform_and_counter_based():
    seeds = np.full(100_000, 12345, dtype=np.uint64)
    u = sample_jitter(seeds, np.arange(100_000))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert np.array_equal(u[300:310], sample_jitter(seeds[:10], np.arange(300, 310)))
    assert not np.array_equal(u[:10], sample_jitter(seeds[:10] + np.uint64(1), np.arange(10)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 120), min_size=1, max_size=20), st.integers(2, 9), st.integers(0, 1000))
def test_every_slot_spreads_its_samples_evenly_over_the_stream(lengths, pool, seed):
    """Sample j of a slot of length L sits near [j, j + 1) * total / L in the schedule (within one per slot)."""
    pieces, positions = _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed), chunk=50))
    slot_of = deal_pieces(lengths, pool)
    slot_lengths = np.bincount(slot_of[slot_of >= 0], weights=np.asarray(lengths)[slot_of >= 0], minlength=pool)
    before = {
        piece: sum(lengths[q] for q in range(piece) if slot_of[q] == slot_of[piece]) for piece in range(len(lengths))
    }
    total = len(pieces)
    for at, (piece, position) in enumerate(zip(pieces, positions)):
        length, j = slot_lengths[slot_of[piece]], before[piece] + position
        assert j * total / length - pool <= at <= (j + 1) * total / length + pool


def test_pieces_of_very_different_lengths_all_reach_the_end_of_the_stream():
    lengths = [10, 800, 35, 200, 60, 400, 120, 20]
    for seed in range(5):
        pieces, _ = _flatten(pool_schedule(lengths, 8, rng_for(seed, 0, 2)))
        assert set(pieces[-len(pieces) // 10 :]) == set(range(8))  # uniform picks leave 1 or 2 pieces here
        assert set(pieces[: len(pieces) // 10]) == set(range(8))


def test_consecutive_samples_come_from_distinct_pieces():
    lengths = [100] * 8
    for seed in range(5):
        pieces, _ = _flatten(pool_schedule(lengths, 8, rng_for(seed, 0, 2)))
        for k, at_least in ((2, 0.97), (4, 0.9)):  # uniform picks: 0.93 and 0.81
            distinct = [len(set(pieces[i : i + k])) / k for i in range(len(pieces) - k + 1)]
            assert np.mean(distinct) >= at_least


def test_take_skips_and_limits_across_chunks():
    chunks = [(np.arange(5), np.arange(5)), (np.arange(5, 9), np.arange(4))]
    pieces, _ = _flatten(take(iter(chunks), 3, 4))
    assert pieces == [3, 4, 5, 6]
    assert _flatten(take(iter(chunks), 20, None)) == ([], [])


def test_window_stride_and_piece_order():
    assert window_stride([]) == 1
    assert window_stride([np.array([0])]) == 1
    assert window_stride([np.array([-140, -120, -100, -80, -60, -40, -20, 0])]) == 20
    assert window_stride([np.array([-4, 0]), np.array([-6, 0])]) == 2
    assert piece_sample_order(3, 10, 3).tolist() == [3, 6, 9, 4, 7, 5, 8]
    assert piece_sample_order(3, 7, 1).tolist() == [3, 4, 5, 6]
