"""StreamingDataLoader: a torch DataLoader that can save and restore the position of a StreamingLeRobotDataset.

Worker processes hold their own copies of the dataset, so the position is not read from them: the loader counts the
batches the training loop consumed and derives every worker's progress (batch b comes from worker b % num_workers,
and all workers yield the same number of batches), then every segment's position. Training loops:

    loader = StreamingDataLoader(dataset, batch_size=32, num_workers=4)
    loader.load_state_dict(checkpoint["data"])      # optional: resume mid-epoch, on any layout
    for batch in loader: ...                         # one batch per step on every rank
        checkpoint["data"] = loader.state_dict()     # JSON-serialisable; rank 0's describes the whole job
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from robostream.datasets.batch_buffers import BatchBuffers
from robostream.datasets.streaming import BatchHook, LoaderBatching, StreamingLeRobotDataset


class StreamingDataLoader(DataLoader):
    """DataLoader over a StreamingLeRobotDataset with `state_dict()` / `load_state_dict()`."""

    def __init__(self, dataset: StreamingLeRobotDataset, batch_size: int = 1, num_workers: int = 0,
                 batch_buffers: BatchBuffers | bool = True, *, on_batch: BatchHook | None = None,
                 **kwargs: Any) -> None:
        """
        Args:
            dataset: the StreamingLeRobotDataset to load.
            batch_size: samples per batch (the resume arithmetic counts batches).
            num_workers: DataLoader worker processes (0: load in this process).
            batch_buffers: workers write batches into reused shared memory (True: default slots; a BatchBuffers
                to choose; False: fresh shared memory per batch, as torch's collate does).
            on_batch: called in the process that assembled each batch (a worker) with the batch and the seconds
                it took to produce; may add keys (instrumentation: the benchmark times the loader through it).
                Needs batches assembled by the dataset (no collate_fn, no image_transforms).
            kwargs: torch's DataLoader arguments (drop_last, pin_memory, prefetch_factor, ...). A collate_fn
                makes the dataset yield samples that it collates (the per-sample path).

        Without a collate_fn, workers assemble whole batches (datasets/batch_assembly.py): torch's DataLoader
        then runs with batch_size=None and passes them through, while `batch_size` and `drop_last` here keep the
        values asked for. Batches are exactly torch's collate of the samples `for sample in dataset` yields.
        """
        if not isinstance(dataset, StreamingLeRobotDataset):
            raise TypeError("StreamingDataLoader needs a StreamingLeRobotDataset")
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True would keep workers on a stale epoch/resume state; leave it off")
        if kwargs.get("in_order") is False:
            raise ValueError("in_order=False makes the batch order (and so the resume position) nondeterministic")
        if batch_size is None:
            raise ValueError("StreamingDataLoader needs a batch_size (the resume arithmetic counts batches)")
        drop_last = bool(kwargs.pop("drop_last", False))
        own_collate = kwargs.get("collate_fn") is None
        if batch_buffers is True:
            batch_buffers = BatchBuffers.for_loader(kwargs.get("prefetch_factor"))
        self.batch_buffers = batch_buffers if batch_buffers and num_workers and own_collate else None
        self._batching = (LoaderBatching(batch_size, drop_last, self.batch_buffers, on_batch)
                          if own_collate and dataset.assembles_batches else None)
        if dataset.batching_method == "per_stream" and (self._batching is None or batch_size != dataset.batch_size
                                                         or drop_last):
            raise ValueError(f"the dataset plans batching='per_stream' for batch_size={dataset.batch_size}: load it "
                             "with that batch_size, no drop_last, no collate_fn and no image_transforms (batches "
                             "are assembled per source by the dataset)")
        if on_batch is not None and self._batching is None:
            raise ValueError("on_batch needs batches assembled by the dataset: pass no collate_fn, and no "
                             "image_transforms to the dataset")
        if self._batching is not None:
            super().__init__(dataset, batch_size=None, num_workers=num_workers, collate_fn=_assembled, **kwargs)
            # torch passes the dataset's batches through; users still see the batching they asked for.
            object.__setattr__(self, "batch_size", batch_size)
            object.__setattr__(self, "drop_last", drop_last)
        else:
            if self.batch_buffers is not None:
                kwargs["collate_fn"] = self.batch_buffers.collate
            super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last,
                             **kwargs)
        self._batches = 0

    def __iter__(self) -> Iterator[Any]:
        self._batches = 0
        if self._batching is None:
            batches = super().__iter__()
        else:
            with self.dataset.batching(self._batching):  # workers start (and copy the dataset) in here
                batches = super().__iter__()
        for batch in batches if self.batch_buffers is None else self.batch_buffers.adopting(batches):
            self._batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The dataset position after the batches consumed so far in the current pass."""
        return self.dataset.state_dict(batches=self._batches, batch_size=self.batch_size,
                                       num_workers=max(1, self.num_workers))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)
        self._batches = 0


def _assembled(batch: Any) -> Any:
    """The collate of a loader whose dataset yields whole batches: nothing left to do."""
    return batch
