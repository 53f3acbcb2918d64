import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.segments import (
    Segments,
    level_fill_order,
    owned,
    positions_after,
    quotas_for_roles,
    read_order,
    recut,
    role_remaining,
    segments_from_state,
    segments_to_state,
    whole_streams,
)


def _rows(segments, positions):
    return [tuple(r) for r in segments_to_state(segments, positions)]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 10**6), st.booleans())
def test_whole_streams_is_todays_ownership_when_consumers_divide_the_streams(consumers, per, seed, interleaved):
    rng = np.random.default_rng(seed)
    natural = rng.integers(0, 20, size=consumers * per)
    segments = whole_streams(natural, consumers)
    assert segments.stream.tolist() == [s for s in range(len(natural)) if natural[s] > 0]  # empty streams left out
    for role in range(consumers):
        streams = [s for s in range(role, len(natural), consumers) if natural[s] > 0]
        assert segments.stream[owned(segments, role)].tolist() == streams
    # ... and every role's emission moves only its own streams, by exactly what it emitted (or all it had)
    emitted = rng.integers(0, 60, size=consumers).tolist()
    after = positions_after(segments, segments.lo, consumers, emitted, interleaved)
    for role in range(consumers):
        rows = owned(segments, role)
        assert int((after[rows] - segments.lo[rows]).sum()) == min(emitted[role], int(segments.hi[rows].sum()))


def _check_exact_cover(natural, segments, positions, consumed):
    """[p, hi) of every segment and the samples consumed so far cover each stream once; [lo, p) is consumed."""
    remaining = [np.zeros(n, dtype=np.int64) for n in natural]
    for s, lo, hi, _, p in segments_to_state(segments, positions):
        assert lo <= p <= hi and consumed[s][lo:p].all()
        remaining[s][p:hi] += 1
    for s in range(len(natural)):
        assert (remaining[s] + consumed[s] == 1).all(), f"stream {s}: a sample lost or owned twice"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=14),
    st.integers(1, 13),
    st.lists(st.tuples(st.integers(1, 13), st.integers(0, 10**6)), max_size=6),
    st.booleans(),
)
def test_emission_and_recuts_neither_repeat_nor_skip_a_sample(natural, consumers, steps, interleaved):
    segments = whole_streams(natural, consumers)
    positions = segments.lo.copy()
    consumed = [np.zeros(n, dtype=bool) for n in natural]
    _check_exact_cover(natural, segments, positions, consumed)
    for new_consumers, seed in steps:
        left = role_remaining(segments, positions, consumers)
        emitted = np.random.default_rng(seed).integers(0, 2 * max(left) + 2, size=consumers).tolist()
        after = positions_after(segments, positions, consumers, emitted, interleaved)
        assert role_remaining(segments, after, consumers) == [r - min(r, e) for r, e in zip(left, emitted)]
        for s, p, q in zip(segments.stream.tolist(), positions.tolist(), after.tolist()):
            assert not consumed[s][p:q].any()
            consumed[s][p:q] = True
        _check_exact_cover(natural, segments, after, consumed)
        segments, positions = recut(segments, after, new_consumers)
        consumers = new_consumers
        assert (positions == segments.lo).all() and (segments.lo < segments.hi).all()
        _check_exact_cover(natural, segments, positions, consumed)
        left = role_remaining(segments, positions, consumers)
        assert max(left) - min(left) <= 1 and sum(left) == sum(int((~c).sum()) for c in consumed)
        again = segments_from_state(json.loads(json.dumps(segments_to_state(segments, positions))), natural, consumers)
        assert _rows(*again) == _rows(segments, positions)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=6), st.booleans())
def test_the_pick_order_agrees_with_positions_after(pairs, interleaved):
    positions = [min(a, b) for a, b in pairs]
    his = [max(a, b) + 1 for a, b in pairs]
    segments = Segments([[s, 0, h, 0] for s, h in enumerate(his)])
    picks = list(read_order(positions, his, interleaved))
    assert len(picks) == sum(his) - sum(positions)
    for n in range(len(picks) + 2):
        counts = np.bincount(np.asarray(picks[:n], dtype=np.int64), minlength=len(his))
        assert (positions_after(segments, positions, 1, [n], interleaved) - positions).tolist() == counts.tolist()
    if interleaved:
        assert picks == list(level_fill_order(positions, his))


def _emit_from(natural, consumers, emitted):
    segments = whole_streams(natural, consumers)
    return segments, positions_after(segments, segments.lo, consumers, emitted)


def test_four_consumers_to_three():
    segments, positions = _emit_from([5] * 12, 4, [6] * 4)  # every stream read up to 2
    assert positions.tolist() == [2] * 12
    segments, positions = recut(segments, positions, 3)  # 36 left: streams 0-3, 4-7, 8-11
    assert _rows(segments, positions) == [(s, 2, 5, s // 4, 2) for s in range(12)]
    assert role_remaining(segments, positions, 3) == [12, 12, 12]
    # Role 0 continues its four streams round-robin from offset 2.
    assert positions_after(segments, positions, 3, [5, 0, 0]).tolist() == [4, 3, 3, 3] + [2] * 8


def test_four_consumers_to_five():
    segments, positions = _emit_from([5] * 12, 4, [6] * 4)
    segments, positions = recut(segments, positions, 5)  # 36 left: chunks of 7, 7, 7, 7, 8
    assert _rows(segments, positions) == [
        (0, 2, 5, 0, 2),
        (1, 2, 5, 0, 2),
        (2, 2, 3, 0, 2),
        (2, 3, 5, 1, 3),
        (3, 2, 5, 1, 2),
        (4, 2, 4, 1, 2),
        (4, 4, 5, 2, 4),
        (5, 2, 5, 2, 2),
        (6, 2, 5, 2, 2),
        (7, 2, 5, 3, 2),
        (8, 2, 5, 3, 2),
        (9, 2, 3, 3, 2),
        (9, 3, 5, 4, 3),
        (10, 2, 5, 4, 2),
        (11, 2, 5, 4, 2),
    ]
    assert role_remaining(segments, positions, 5) == [7, 7, 7, 7, 8]
    # Role 1: stream 2 starts at offset 3, so streams 3 and 4 catch up to it first, then all three round-robin.
    rows = owned(segments, 1)
    assert list(itertools.islice(level_fill_order(positions[rows], segments.hi[rows]), 5)) == [1, 2, 0, 1, 2]
    # Padding: role 1 emitting more than its 7 samples only finishes its segments.
    after = positions_after(segments, positions, 5, [0, 20, 0, 0, 0])
    assert after[rows].tolist() == segments.hi[rows].tolist()


def test_twelve_consumers_to_seven_and_back():
    natural = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    segments, positions = _emit_from(natural, 12, [3] * 12)
    assert positions.tolist() == [3] * 12
    segments, positions = recut(segments, positions, 7)
    left = role_remaining(segments, positions, 7)
    assert sum(left) == sum(natural) - 36 and max(left) - min(left) <= 1
    assert len(segments) <= 12 + 6
    segments, positions = recut(segments, positions_after(segments, positions, 7, [10] * 7), 12)
    left = role_remaining(segments, positions, 12)
    assert sum(left) == sum(natural) - 36 - 70 and max(left) - min(left) <= 1
    # A layout that does not divide the stream count starts a fresh epoch the same way.
    fresh = whole_streams(natural, 7)
    assert max(role_remaining(fresh, fresh.lo, 7)) - min(role_remaining(fresh, fresh.lo, 7)) <= 1


def test_fewer_samples_than_consumers():
    segments, positions = recut(*_emit_from([2, 1], 2, [1, 0]), 5)  # 2 samples left, 5 roles
    assert _rows(segments, positions) == [(0, 1, 2, 2, 1), (1, 0, 1, 4, 0)]  # bounds 0, 0, 0, 1, 1, 2
    assert role_remaining(segments, positions, 5) == [0, 0, 1, 0, 1]


def test_quotas_equalise_ranks_not_workers():
    assert quotas_for_roles([10, 7], 2, 1, "pad") == [10, 10]  # 2 ranks x 1 worker
    assert quotas_for_roles([10, 7], 2, 1, "drop") == [7, 7]
    per_role = [6, 5, 7, 4]  # 2 ranks x 2 workers: worker w gets the same quota on both ranks
    assert quotas_for_roles(per_role, 2, 2, "drop") == [6, 4, 6, 4]
    assert quotas_for_roles(per_role, 2, 2, "pad") == [7, 5, 7, 5]
    assert quotas_for_roles([10, 7], 1, 2, "pad") == [10, 7]
    with pytest.raises(ValueError, match="uneven"):
        quotas_for_roles(per_role, 2, 2, "sometimes")
    with pytest.raises(ValueError, match="3 remaining counts"):
        quotas_for_roles([1, 2, 3], 2, 2, "pad")


@pytest.mark.parametrize(
    "rows, message",
    [
        ([[0, 0, 5, 0, 0], [1, 0, 4]], r"row 1: .* not five integers"),
        ([[0, 0, 5, 0, 0], [1, 0, 4, 0, 1.5]], r"row 1: .* not five integers"),
        ([[2, 0, 5, 0, 0]], r"row 0: stream 2 is not in \[0, 2\)"),
        ([[0, 0, 5, 0, 0], [1, 0, 9, 0, 0]], r"row 1: needs 0 <= lo < hi <= 6 .* hi=9"),
        ([[0, 3, 5, 0, 2]], r"row 0: .* lo=3, hi=5, position=2"),
        ([[0, 3, 3, 0, 3]], r"row 0: needs 0 <= lo < hi"),
        ([[0, 0, 5, 3, 0]], r"row 0: owner 3 is not in \[0, 3\)"),
        ([[0, 0, 5, 0, 0], [1, 0, 6, 1, 0], [0, 4, 5, 2, 4]], r"row 2: \[4, 5\) of stream 0 overlaps row 0's \[0, 5\)"),
    ],
)
def test_segments_from_state_rejects_bad_rows(rows, message):
    with pytest.raises(ValueError, match=message):
        segments_from_state(rows, [5, 6], 3)


def test_segments_from_state_round_trip():
    segments, positions = recut(*_emit_from([5] * 12, 4, [6] * 4), 5)
    positions = positions_after(segments, positions, 5, [3, 1, 4, 1, 5])
    state = json.loads(json.dumps(segments_to_state(segments, positions)))
    again, again_positions = segments_from_state(state, [5] * 12, 5)
    assert np.array_equal(again.table, segments.table) and np.array_equal(again_positions, positions)
