"""Batches of a map-style sampler that carry the indices their worker will be asked for next.

A DataLoader worker sees one batch of indices at a time, so a map-style dataset cannot fetch the next batch's bytes
while it decodes this one: from object storage every batch then waits a full round trip. `LookAheadBatchSampler`
wraps any sampler (shuffled, distributed, weighted), batches it as torch's BatchSampler does (the same batches), and
hands each batch the indices of the `depth` batches its worker gets next: with torch's round-robin dispatch over
`num_workers` workers and `look_ahead=num_workers`, those are the batches `look_ahead`, 2 x `look_ahead`, ...
places later. `LeRobotDataset` fetches their bytes in the background, nearest first, while it decodes
(`LeRobotDataset.__getitems__`); the samples returned are unchanged.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sized

from torch.utils.data import Sampler


class LookAheadBatch(list):
    """A batch of indices (a list, as torch's BatchSampler yields) with `ahead`: the batches the worker that gets
    this batch will be asked for next, nearest first (fewer at the end of the epoch). A list subclass with an
    attribute survives the pickling to DataLoader workers."""

    ahead: list[list[int]]

    def __init__(self, indices: Iterable[int], ahead: Iterable[Iterable[int]] = ()) -> None:
        super().__init__(indices)
        self.ahead = [list(batch) for batch in ahead]


class LookAheadBatchSampler(Sampler[list[int]]):
    """torch's BatchSampler over `sampler`, each batch carrying the `depth` batches its worker gets next."""

    def __init__(
        self, sampler: Iterable[int], *, batch_size: int, drop_last: bool = False, look_ahead: int = 1, depth: int = 2
    ) -> None:
        """
        Args:
            sampler: the indices in order (e.g. RandomSampler, DistributedSampler).
            batch_size: indices per batch.
            drop_last: drop the last batch when it is short.
            look_ahead: batches between a batch and the next one of the same worker: the DataLoader's num_workers
                (each worker gets every num_workers-th batch), 1 without workers.
            depth: how many of the worker's next batches each batch names (their bytes are fetched while it
                decodes: 2 leaves a whole batch's decoding for the farther one's round trips).
        """
        if batch_size < 1 or look_ahead < 1 or depth < 0:
            raise ValueError(f"batch_size={batch_size} and look_ahead={look_ahead} must be >= 1, depth={depth} >= 0")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last
        self.look_ahead, self.depth = look_ahead, depth

    def __iter__(self) -> Iterator[LookAheadBatch]:
        indices = iter(self.sampler)
        batches = iter(lambda: list(itertools.islice(indices, self.batch_size)), [])
        if self.drop_last:
            batches = itertools.takewhile(lambda batch: len(batch) == self.batch_size, batches)
        span = self.look_ahead * self.depth
        window: deque[list[int]] = deque(itertools.islice(batches, span + 1))
        while window:
            ahead = list(window)[self.look_ahead :: self.look_ahead][: self.depth]
            yield LookAheadBatch(window.popleft(), ahead)
            window.extend(itertools.islice(batches, 1))

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError("the wrapped sampler has no length")
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
