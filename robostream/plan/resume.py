"""Resume arithmetic: from batches consumed to per-stream offsets, and from offsets to each consumer's quota.

All ranks of a data-parallel job consume batches in lockstep (one per step), and a DataLoader returns batch b from
worker b % num_workers when every worker yields the same number of batches (which the quotas below guarantee). So
the number of batches one rank consumed determines how many samples every consumer emitted, and from that the
offset of every canonical stream: a few integers that any layout can continue from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def round_robin_counts(remaining: Sequence[int] | np.ndarray, picks: int) -> np.ndarray:
    """How many samples each stream gives after `picks` round-robin picks that skip exhausted streams."""
    remaining = np.asarray(remaining, dtype=np.int64)
    taken = np.zeros(len(remaining), dtype=np.int64)
    picks = int(min(picks, remaining.sum()))
    while picks > 0:
        active = np.flatnonzero(taken < remaining)
        full_rounds = min(int((remaining[active] - taken[active]).min()), picks // len(active))
        if full_rounds:
            taken[active] += full_rounds
            picks -= full_rounds * len(active)
            continue
        taken[active[:picks]] += 1  # a partial round: the first `picks` active streams in order
        picks = 0
    return taken


def rotation_after(remaining: Sequence[int], batches: int, rotation: int) -> int:
    """The worker rotation that continues a DataLoader's cycle after it took `batches` more batches.

    Worker j plays role (j + rotation) % W and has remaining[j] batches. The loader takes batches from its workers
    in turn and skips those that have run out, so once one runs out the next batch is not from worker
    batches % W: it is from the first worker still running that has given the fewest batches (the rest of the
    current round, in worker order). A resumed loader starts its cycle at worker 0, so that worker must play the
    role of the one whose batch comes next.
    """
    taken = round_robin_counts(remaining, batches)
    active = np.flatnonzero(taken < np.asarray(remaining, dtype=np.int64))
    if not len(active):  # the pass is over: no worker's turn is left to keep
        return int((rotation + batches) % len(remaining))
    following = int(active[np.argmin(taken[active])])  # argmin: the first of the fewest
    return int((following + rotation) % len(remaining))


def samples_per_worker(batches: int, quotas: Sequence[int], batch_size: int) -> list[int]:
    """Samples each DataLoader worker of a rank delivered once the rank consumed `batches` batches.

    A DataLoader takes batches from its workers cyclically and skips a worker that has run out.
    """
    totals = [-(-q // batch_size) for q in quotas]
    taken = round_robin_counts(totals, batches)
    return [min(q, int(b) * batch_size) for q, b in zip(quotas, taken)]


def emitted_by_role(
    batches: int, quotas: Sequence[int], batch_size: int, world_size: int, num_workers: int, rotation: int
) -> list[int]:
    """Samples every consumer role (rank * num_workers + worker) emitted once each rank consumed `batches` batches.

    Ranks consume in lockstep, so every rank's workers delivered alike; a rank's DataLoader takes batches from its
    workers cyclically starting at worker 0, which plays role (0 + rotation) % num_workers after a same-layout
    resume.

    Args:
        batches: batches one rank consumed since the plan's positions.
        quotas: per role, the samples it yields in this pass.
        batch_size: samples per batch (a worker's last batch may be short).
        world_size: ranks.
        num_workers: DataLoader workers per rank (1 without workers).
        rotation: the plan's worker rotation.

    Returns:
        One count per role.
    """
    emitted = [0] * (world_size * num_workers)
    for rank in range(world_size):
        roles = [rank * num_workers + (j + rotation) % num_workers for j in range(num_workers)]
        for role, n in zip(roles, samples_per_worker(batches, [quotas[r] for r in roles], batch_size)):
            emitted[role] = n
    return emitted


def level_fill_counts(
    offsets: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray, picks: int
) -> np.ndarray:
    """Samples each stream gives to `picks` picks that always take the unfinished stream with the lowest offset
    (ties: lowest index).

    From equal offsets this is a round-robin over the streams; from unequal ones (after an elastic resume) the
    streams that are behind catch up first. It depends only on the offsets, so a resume continues it exactly.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    capacity = np.asarray(lengths, dtype=np.int64) - offsets
    picks = int(min(picks, capacity.sum()))
    if picks <= 0:
        return np.zeros(len(offsets), dtype=np.int64)
    lo, hi = int(offsets.min()), int((offsets + capacity).max())
    while lo < hi:  # the highest level every unfinished stream can be raised to within `picks`
        mid = (lo + hi + 1) // 2
        if np.clip(mid - offsets, 0, capacity).sum() <= picks:
            lo = mid
        else:
            hi = mid - 1
    taken = np.clip(lo - offsets, 0, capacity)
    at_level = np.flatnonzero((offsets + taken == lo) & (taken < capacity))
    taken[at_level[: picks - int(taken.sum())]] += 1
    return taken


def sequential_counts(remaining: Sequence[int] | np.ndarray, picks: int) -> np.ndarray:
    """How many samples each stream gives after `picks` picks that exhaust the streams one after the other."""
    remaining = np.asarray(remaining, dtype=np.int64)
    return np.clip(picks - np.concatenate([[0], np.cumsum(remaining)[:-1]]), 0, remaining)
