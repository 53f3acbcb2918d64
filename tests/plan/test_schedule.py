import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.order import rng_for
from robostream.plan.schedule import piece_sample_order, pool_schedule, take, window_stride


def _flatten(chunks):
    chunks = list(chunks)
    if not chunks:
        return [], []
    return np.concatenate([c[0] for c in chunks]).tolist(), np.concatenate([c[1] for c in chunks]).tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 80), min_size=1, max_size=25), st.integers(1, 9), st.integers(0, 1000),
       st.integers(1, 300))
def test_pool_schedule_emits_every_sample_once_in_piece_order(lengths, pool, seed, chunk):
    pieces, positions = _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed), chunk=chunk))
    for piece, length in enumerate(lengths):
        assert [p for q, p in zip(pieces, positions) if q == piece] == list(range(length))
    # The chunk size is an implementation detail: the schedule must not depend on it (resume relies on this).
    assert (pieces, positions) == _flatten(pool_schedule(lengths, pool, np.random.default_rng(seed)))


def test_pool_never_holds_more_than_pool_size_pieces():
    lengths = [30] * 20
    pieces, positions = _flatten(pool_schedule(lengths, 4, rng_for(0, 0, 2)))
    live = set()
    for piece, position in zip(pieces, positions):
        live.add(piece)
        assert len(live) <= 4
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
