"""Segments: who reads which part of which canonical stream, for any number of consumers. Pure functions.

An epoch is planned over C canonical streams whose sample sequences are fixed (their pool schedules). A segment
is a half-open range [lo, hi) of one stream's sequence owned by one consumer role, with a position p
(lo <= p <= hi): samples [lo, p) are consumed, [p, hi) remain. A fresh epoch has one segment per stream, and when
the consumer count K divides C, role k owns streams k, k + K, ... (the canonical-nodes layout). When a job
continues on another layout, `recut` concatenates what remains and cuts it into K' contiguous chunks of sizes
differing by at most one, so every layout continues the epoch with no sample repeated or skipped. Owners are stored
explicitly, so a state can be continued, recut and continued again any number of times.

The trade-off, against requiring K' to divide C:
- a recut may split segments: each adds at most K' - 1 cuts (the table holds at most S + K' - 1 segments; exhausted
  ones disappear), and a consumer taking over the middle of a stream skips to `lo` in its schedule;
- a role reads its segments by level fill on absolute stream offsets (lowest position first), which depends only on
  the positions (so resumes continue exactly) but, right after a recut, reads a segment that starts deep into its
  stream only once the role's other segments have caught up with it: fewer streams mixed for a while.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from robostream.plan.resume import level_fill_counts, sequential_counts


@dataclass(frozen=True, eq=False)
class Segments:
    """A read-only segment table: one row (stream, lo, hi, owner) per segment, in table order."""

    table: np.ndarray

    def __post_init__(self) -> None:
        table = np.array(self.table, dtype=np.int64).reshape(-1, 4)
        table.setflags(write=False)
        object.__setattr__(self, "table", table)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def stream(self) -> np.ndarray:
        return self.table[:, 0]

    @property
    def lo(self) -> np.ndarray:
        return self.table[:, 1]

    @property
    def hi(self) -> np.ndarray:
        return self.table[:, 2]

    @property
    def owner(self) -> np.ndarray:
        return self.table[:, 3]


def _positions(segments: Segments, positions: Sequence[int] | np.ndarray) -> np.ndarray:
    positions = np.asarray(positions, dtype=np.int64)
    if positions.shape != (len(segments),):
        raise ValueError(f"{positions.shape[0] if positions.ndim else 0} positions for {len(segments)} segments")
    if ((positions < segments.lo) | (positions > segments.hi)).any():
        bad = int(np.flatnonzero((positions < segments.lo) | (positions > segments.hi))[0])
        raise ValueError(
            f"segment {bad}: position {int(positions[bad])} outside [{int(segments.lo[bad])}, {int(segments.hi[bad])}]"
        )
    return positions


def whole_streams(natural: Sequence[int] | np.ndarray, consumers: int) -> Segments:
    """The segments of a fresh epoch: every non-empty stream whole.

    Args:
        natural: samples each canonical stream holds.
        consumers: consumer roles (world_size x num_workers).

    Returns:
        One segment (s, 0, natural[s]) per non-empty stream s owned by s % consumers when `consumers` divides the
        stream count; otherwise the whole streams recut into `consumers` chunks (see `recut`).
    """
    natural = np.asarray(natural, dtype=np.int64)
    if consumers < 1 or (natural < 0).any():
        raise ValueError(f"whole_streams: need consumers >= 1 and non-negative lengths, got {consumers}, {natural}")
    streams = np.flatnonzero(natural > 0)
    whole = Segments(np.stack([streams, np.zeros_like(streams), natural[streams], streams % consumers], axis=1))
    if len(natural) % consumers == 0:
        return whole
    return recut(whole, whole.lo, consumers)[0]


def recut(segments: Segments, positions: Sequence[int] | np.ndarray, consumers: int) -> tuple[Segments, np.ndarray]:
    """Divide what remains among `consumers` roles, in contiguous chunks of sizes differing by at most one.

    Args:
        segments: the current table.
        positions: the current position of every segment.
        consumers: the new number of consumer roles.

    Returns:
        (segments, positions): the remaining parts [p, hi), concatenated in table order and cut at
        total * j // consumers; chunk j's parts are owned by role j and start at their lo. Exhausted segments
        disappear; adjacent parts of one stream with one owner merge. With fewer samples than roles, some roles
        own nothing.
    """
    if consumers < 1:
        raise ValueError(f"recut: consumers must be >= 1, got {consumers}")
    positions = _positions(segments, positions)
    total = int((segments.hi - positions).sum())
    bounds = [total * j // consumers for j in range(consumers + 1)]
    rows: list[list[int]] = []
    offset, chunk = 0, 0  # samples before the current part; its chunk
    for stream, start, stop in zip(segments.stream.tolist(), positions.tolist(), segments.hi.tolist()):
        a = start
        while a < stop:
            while bounds[chunk + 1] <= offset + a - start:
                chunk += 1
            b = min(stop, start + bounds[chunk + 1] - offset)
            if rows and rows[-1][0] == stream and rows[-1][2] == a and rows[-1][3] == chunk:
                rows[-1][2] = b
            else:
                rows.append([stream, a, b, chunk])
            a = b
        offset += stop - start
    table = Segments(np.array(rows, dtype=np.int64))
    return table, table.lo.copy()


def owned(segments: Segments, role: int) -> np.ndarray:
    """Indices of the segments owned by `role`, in table order.

    Args:
        segments: the table.
        role: a consumer role (rank * num_workers + worker).

    Returns:
        An int64 array of row indices.
    """
    return np.flatnonzero(segments.owner == role)


def role_remaining(segments: Segments, positions: Sequence[int] | np.ndarray, consumers: int) -> list[int]:
    """Samples every role still has to read.

    Args:
        segments: the table.
        positions: the current position of every segment.
        consumers: the number of roles.

    Returns:
        One count per role 0 .. consumers - 1.
    """
    left = np.zeros(consumers, dtype=np.int64)
    np.add.at(left, segments.owner, segments.hi - _positions(segments, positions))
    return left.tolist()


def positions_after(
    segments: Segments,
    positions: Sequence[int] | np.ndarray,
    consumers: int,
    emitted: Sequence[int],
    interleaved: bool = True,
) -> np.ndarray:
    """Positions once every role r has emitted emitted[r] samples since `positions`.

    Args:
        segments: the table.
        positions: the positions the emission started from.
        consumers: the number of roles.
        emitted: samples each role emitted; those beyond what a role had (padding) move nothing.
        interleaved: whether roles read their segments by level fill (shuffled epochs, see `level_fill_order`) or
            one after the other in table order (chronological epochs).

    Returns:
        The new positions (a new int64 array).
    """
    positions = _positions(segments, positions).copy()
    if len(emitted) != consumers or (segments.owner >= consumers).any():
        raise ValueError(
            f"positions_after: {len(emitted)} emitted counts, owners up to "
            f"{int(segments.owner.max(initial=-1))}, for {consumers} consumers"
        )
    for role in range(consumers):
        rows = owned(segments, role)
        if interleaved:
            positions[rows] += level_fill_counts(positions[rows], segments.hi[rows], emitted[role])
        else:
            positions[rows] += sequential_counts(segments.hi[rows] - positions[rows], emitted[role])
    return positions


def level_fill_order(positions: Iterable[int], his: Iterable[int]) -> Iterator[int]:
    """Which segment each pick of a role takes: the unfinished one with the lowest position (ties: lowest index).

    Agrees with `positions_after(..., interleaved=True)` for any number of picks.

    Args:
        positions: current positions of the role's segments (e.g. positions[owned(segments, role)]).
        his: their ends.

    Returns:
        An iterator of indices into the given lists, one per pick, until every segment is finished.
    """
    heap = [(int(p), i, int(h)) for i, (p, h) in enumerate(zip(positions, his)) if p < h]
    heapq.heapify(heap)
    while heap:
        p, i, h = heap[0]
        yield i
        if p + 1 < h:
            heapq.heapreplace(heap, (p + 1, i, h))
        else:
            heapq.heappop(heap)


def read_order(positions: Iterable[int], his: Iterable[int], interleaved: bool = True) -> Iterator[int]:
    """Like `level_fill_order`, or the segments one after the other when not `interleaved`.

    Args:
        positions: current positions of the role's segments.
        his: their ends.
        interleaved: level fill (shuffled epochs) or sequential (chronological epochs).

    Returns:
        An iterator of indices into the given lists, one per pick.
    """
    if interleaved:
        return level_fill_order(positions, his)
    return (i for i, (p, h) in enumerate(zip(positions, his)) for _ in range(int(h) - int(p)))


def quotas_for_roles(
    remaining_per_role: Sequence[int], world_size: int, num_workers: int, uneven: Literal["pad", "drop"]
) -> list[int]:
    """Samples each role yields so that every rank yields the same batches.

    Ranks must agree on the number of steps; workers of one rank need not. So worker w of every rank gets the same
    quota: the largest of their remaining counts (uneven="pad": the others repeat samples) or the smallest
    ("drop": the others stop early). A single rank yields every remaining sample, once.

    Args:
        remaining_per_role: samples each role (rank * num_workers + worker) still has (`role_remaining`).
        world_size: ranks.
        num_workers: DataLoader workers per rank.
        uneven: "pad" or "drop".

    Returns:
        One quota per role.
    """
    if uneven not in ("pad", "drop"):
        raise ValueError(f"uneven={uneven!r}: expected 'pad' or 'drop'")
    if len(remaining_per_role) != world_size * num_workers:
        raise ValueError(f"{len(remaining_per_role)} remaining counts for {world_size} x {num_workers} roles")
    pick = max if uneven == "pad" else min
    per_worker = [
        pick(int(remaining_per_role[r * num_workers + w]) for r in range(world_size)) for w in range(num_workers)
    ]
    return [per_worker[k % num_workers] for k in range(world_size * num_workers)]


def segments_to_state(segments: Segments, positions: Sequence[int] | np.ndarray) -> list[list[int]]:
    """A JSON-serialisable form of a table and its positions.

    Args:
        segments: the table.
        positions: the position of every segment.

    Returns:
        One row [stream, lo, hi, owner, position] per segment, in table order.
    """
    positions = _positions(segments, positions)
    return np.column_stack([segments.table, positions]).tolist()


def segments_from_state(
    rows: Sequence[Sequence[int]], natural: Sequence[int], consumers: int
) -> tuple[Segments, np.ndarray]:
    """Read back `segments_to_state` rows, validated against the epoch's streams and the layout.

    Args:
        rows: [stream, lo, hi, owner, position] per segment.
        natural: samples each canonical stream holds.
        consumers: the number of roles the owners refer to.

    Returns:
        (segments, positions).

    Raises:
        ValueError: naming the first bad row: not five integers, stream out of range, not
            0 <= lo <= position <= hi <= natural[stream] with lo < hi, owner out of range, or overlapping another
            segment of its stream.
    """
    for i, row in enumerate(rows):
        if len(row) != 5 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in row):
            raise ValueError(f"segment row {i}: {row!r} is not five integers [stream, lo, hi, owner, position]")
        stream, lo, hi, owner, position = (int(v) for v in row)
        if not 0 <= stream < len(natural):
            raise ValueError(f"segment row {i}: stream {stream} is not in [0, {len(natural)})")
        if not 0 <= lo <= position <= hi <= natural[stream] or lo == hi:
            raise ValueError(
                f"segment row {i}: needs 0 <= lo < hi <= {natural[stream]} (stream {stream}'s "
                f"length) and lo <= position <= hi, got lo={lo}, hi={hi}, position={position}"
            )
        if not 0 <= owner < consumers:
            raise ValueError(f"segment row {i}: owner {owner} is not in [0, {consumers})")
    table = np.array(rows, dtype=np.int64).reshape(-1, 5)
    order = np.lexsort((table[:, 1], table[:, 0]))
    for a, b in zip(order[:-1].tolist(), order[1:].tolist()):
        if table[a, 0] == table[b, 0] and table[a, 2] > table[b, 1]:
            raise ValueError(
                f"segment row {b}: [{table[b, 1]}, {table[b, 2]}) of stream {table[b, 0]} overlaps "
                f"row {a}'s [{table[a, 1]}, {table[a, 2]})"
            )
    return Segments(table[:, :4]), table[:, 4].copy()
