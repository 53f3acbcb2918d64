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
from robostream.datasets.streaming import StreamingLeRobotDataset


class StreamingDataLoader(DataLoader):
    """DataLoader over a StreamingLeRobotDataset with `state_dict()` / `load_state_dict()`."""

    def __init__(self, dataset: StreamingLeRobotDataset, batch_size: int = 1, num_workers: int = 0,
                 batch_buffers: BatchBuffers | bool = True, **kwargs: Any) -> None:
        """kwargs go to torch's DataLoader. batch_buffers: workers collate the large tensors of a batch (cameras)
        into reused shared memory (True: default slots; a BatchBuffers to choose; False: torch's default collate).
        A passed collate_fn replaces it."""
        if not isinstance(dataset, StreamingLeRobotDataset):
            raise TypeError("StreamingDataLoader needs a StreamingLeRobotDataset")
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True would keep workers on a stale epoch/resume state; leave it off")
        if kwargs.get("in_order") is False:
            raise ValueError("in_order=False makes the batch order (and so the resume position) nondeterministic")
        if batch_size is None:
            raise ValueError("StreamingDataLoader needs a batch_size (the resume arithmetic counts batches)")
        # Workers collate camera batches into reused shared memory unless the caller brings its own collate_fn.
        if batch_buffers is True:
            batch_buffers = BatchBuffers.for_loader(kwargs.get("prefetch_factor"))
        self.batch_buffers = batch_buffers if batch_buffers and num_workers and kwargs.get("collate_fn") is None \
            else None
        if self.batch_buffers is not None:
            kwargs["collate_fn"] = self.batch_buffers.collate
        super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, **kwargs)
        self._batches = 0

    def __iter__(self) -> Iterator[Any]:
        self._batches = 0
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
