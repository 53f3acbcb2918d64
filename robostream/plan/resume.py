"""Resume arithmetic: from batches consumed to per-stream offsets, and from offsets to each consumer's quota.

All ranks of a data-parallel job consume batches in lockstep (one per step), and a DataLoader returns batch b from
worker b % num_workers when every worker yields the same number of batches (which the quotas below guarantee). So
the number of batches one rank consumed determines how many samples every consumer emitted, and from that the
offset of every canonical stream: a few integers that any layout can continue from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def round_robin_counts(remaining: Sequence[int], picks: int) -> np.ndarray:
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


def round_robin_order(remaining: Sequence[int]) -> np.ndarray:
    """The stream (by position) of each pick of a round-robin over streams with these remaining counts."""
    remaining = np.asarray(remaining, dtype=np.int64)
    order = []
    for level in range(int(remaining.max(initial=0))):
        order.extend(np.flatnonzero(remaining > level).tolist())
    return np.asarray(order, dtype=np.int64)


def consumer_quota(stream_remaining: Sequence[int], consumers: int, uneven: str) -> int:
    """Samples every consumer emits so that all emit the same number (equal batch counts on every rank).

    uneven="pad": the largest remaining count (shorter consumers repeat samples); "drop": the smallest.
    """
    remaining = np.asarray(stream_remaining, dtype=np.int64)
    per_consumer = [int(remaining[c::consumers].sum()) for c in range(consumers)]
    if uneven == "pad":
        return max(per_consumer)
    if uneven == "drop":
        return min(per_consumer)
    raise ValueError(f"uneven={uneven!r}: expected 'pad' or 'drop'")


def samples_per_worker(batches: int, num_workers: int, batch_size: int, quota: int) -> list[int]:
    """Samples each DataLoader worker of a rank has delivered after the rank consumed `batches` batches."""
    delivered = []
    for worker in range(num_workers):
        worker_batches = len(range(worker, batches, num_workers))
        delivered.append(min(quota, worker_batches * batch_size))
    return delivered


def sequential_counts(remaining: Sequence[int], picks: int) -> np.ndarray:
    """How many samples each stream gives after `picks` picks that exhaust the streams one after the other."""
    remaining = np.asarray(remaining, dtype=np.int64)
    return np.clip(picks - np.concatenate([[0], np.cumsum(remaining)[:-1]]), 0, remaining)


def stream_offsets_after(start_offsets: Sequence[int], stream_lengths: Sequence[int], consumers: int,
                         emitted: Sequence[int], interleaved: bool = True) -> list[int]:
    """Per-stream offsets once consumer k (of `consumers`) has emitted emitted[k] samples since `start_offsets`.

    Consumer k owns streams k, k + consumers, ...; `interleaved` says whether it reads them round-robin (shuffled
    epochs) or one after the other (chronological epochs). Samples emitted beyond the streams' end (padding)
    do not move the offsets.
    """
    offsets = np.asarray(start_offsets, dtype=np.int64).copy()
    lengths = np.asarray(stream_lengths, dtype=np.int64)
    count = round_robin_counts if interleaved else sequential_counts
    for consumer in range(consumers):
        streams = np.arange(consumer, len(offsets), consumers)
        offsets[streams] += count(lengths[streams] - offsets[streams], emitted[consumer])
    return offsets.tolist()
