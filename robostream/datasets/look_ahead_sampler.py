"""Batches of a map-style sampler that carry the indices their worker will be asked for next.

A DataLoader worker sees one batch of indices at a time, so a map-style dataset cannot fetch the next batch's bytes
while it decodes this one: from object storage every batch then waits a full round trip. `LookAheadBatchSampler`
wraps any sampler (shuffled, distributed, weighted), batches it as torch's BatchSampler does (the same batches), and
hands each batch the indices of the batch `look_ahead` places later: with torch's round-robin dispatch over
`num_workers` workers and `look_ahead=num_workers`, that is the same worker's next batch. `LeRobotDataset` fetches
those bytes in the background (`LeRobotDataset.__getitems__`); the samples returned are unchanged.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sized

from torch.utils.data import Sampler


class LookAheadBatch(list):
    """A batch of indices (a list, as torch's BatchSampler yields) with `ahead`: the indices the worker that gets
    this batch will be asked for next (empty at the end of the epoch). A list subclass with an attribute survives
    the pickling to DataLoader workers."""

    ahead: list[int]

    def __init__(self, indices: Iterable[int], ahead: Iterable[int] = ()) -> None:
        super().__init__(indices)
        self.ahead = list(ahead)


class LookAheadBatchSampler(Sampler[list[int]]):
    """torch's BatchSampler over `sampler`, each batch carrying the indices `look_ahead` batches later."""

    def __init__(self, sampler: Iterable[int], *, batch_size: int, drop_last: bool = False,
                 look_ahead: int = 1) -> None:
        """
        Args:
            sampler: the indices in order (e.g. RandomSampler, DistributedSampler).
            batch_size: indices per batch.
            drop_last: drop the last batch when it is short.
            look_ahead: batches between a batch and the one whose indices it carries: the DataLoader's
                num_workers (each worker gets every num_workers-th batch), 1 without workers.
        """
        if batch_size < 1 or look_ahead < 1:
            raise ValueError(f"batch_size={batch_size} and look_ahead={look_ahead} must be >= 1")
        self.sampler, self.batch_size, self.drop_last, self.look_ahead = sampler, batch_size, drop_last, look_ahead

    def __iter__(self) -> Iterator[LookAheadBatch]:
        indices = iter(self.sampler)
        batches = iter(lambda: list(itertools.islice(indices, self.batch_size)), [])
        if self.drop_last:
            batches = itertools.takewhile(lambda batch: len(batch) == self.batch_size, batches)
        window: deque[list[int]] = deque(itertools.islice(batches, self.look_ahead))
        for batch in batches:
            yield LookAheadBatch(window.popleft(), batch)
            window.append(batch)
        for batch in window:
            yield LookAheadBatch(batch)

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError("the wrapped sampler has no length")
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
