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

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from robostream.datasets.batch_assembly import TensorSpecs, allocate_fresh
from robostream.datasets.batch_buffers import BatchBuffers, shared_tensors
from robostream.datasets.collate import collate_samples
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.numbers import finite_number

# Called in the process that assembled a batch with the batch and the seconds it took; may add keys to it.
BatchHook = Callable[[dict[str, Any], float], None]
# Called in the process that assembled a batch (a worker) with the batch and the dataset's epoch; returns the batch
# with some tensors replaced by others of the same shape and dtype (augmentations: robostream.augment).
BatchTransform = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class LoaderBatching:
    """How a loader's iteration yields whole batches (see StreamingDataLoader)."""

    batch_size: int
    drop_last: bool
    buffers: BatchBuffers | None  # shared-memory slots for worker processes; None: fresh memory
    on_batch: BatchHook | None = None
    transform: BatchTransform | None = None
    # Batches in slots travel as views of the slot (BatchBuffers.send); not with pin_memory, whose thread pins tensors.
    views: bool = True


class DatasetBatches(IterableDataset):
    """What torch iterates when the dataset assembles whole batches: a view of one dataset's batches as one loader
    asks for them. The dataset itself is not changed, so it can be iterated elsewhere meanwhile; worker processes
    get a copy of the view, and with it of the dataset."""

    def __init__(self, dataset: StreamingLeRobotDataset, batching: LoaderBatching) -> None:
        self.dataset, self.batching = dataset, batching

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _timed_batches(self.dataset, self.batching)


def _timed_batches(dataset: StreamingLeRobotDataset, batching: LoaderBatching) -> Iterator[dict[str, Any]]:
    """The dataset's batches, in reused slots when the loader has buffers, each passed to the hook with the time
    this process spent producing it (the consumer's time between two pulls is not counted)."""
    slots: list[int | None] = []

    def allocate(specs: TensorSpecs) -> dict[str, torch.Tensor]:
        if batching.buffers is None:
            # A worker's batch goes to the main process: shared memory now saves a copy into it when sent.
            return allocate_fresh(specs) if get_worker_info() is None else shared_tensors(specs)
        tensors, slot = batching.buffers.allocate(specs)
        slots.append(slot)
        return tensors

    batches = dataset.batches(batch_size=batching.batch_size, drop_last=batching.drop_last, allocate=allocate)
    while True:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return
        slot = slots.pop() if slots else None
        if batching.transform is not None:
            _transform_in_place(batch, batching.transform, dataset.epoch)
        if batching.on_batch is not None:
            batching.on_batch(batch, time.perf_counter() - started)
        if slot is not None and batching.buffers is not None:
            batch = batching.buffers.send(batch, slot, views=batching.views)
        yield batch


def _transform_in_place(batch: dict[str, Any], transform: BatchTransform, epoch: int) -> None:
    """Write the transform's tensors into the batch's own: a worker's batch may live in a reused shared-memory slot,
    which the main process reads, so the result must land there rather than in new memory."""
    for key, value in transform(batch, epoch=epoch).items():
        old = batch.get(key)
        if value is old:
            continue
        if (
            not isinstance(old, torch.Tensor)
            or not isinstance(value, torch.Tensor)
            or value.shape != old.shape
            or value.dtype != old.dtype
        ):
            raise ValueError(
                f"batch_transform changed {key!r} (to {getattr(value, 'shape', type(value))}, "
                f"{getattr(value, 'dtype', '')}): it must return tensors of the batch's own shapes "
                "and dtypes"
            )
        old.copy_(value)


class StreamingDataLoader(DataLoader):
    """DataLoader over a StreamingLeRobotDataset with `state_dict()` / `load_state_dict()`."""

    def __init__(
        self,
        dataset: StreamingLeRobotDataset,
        batch_size: int | None = None,
        num_workers: int = 0,
        batch_buffers: BatchBuffers | bool = True,
        *,
        on_batch: BatchHook | None = None,
        batch_transform: BatchTransform | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            dataset: the StreamingLeRobotDataset to load.
            batch_size: samples per batch (the resume arithmetic counts batches); default the batch size the
                dataset plans for (batching="per_stream"), else 1.
            num_workers: DataLoader worker processes (0: load in this process).
            batch_buffers: workers write batches into reused shared memory (True: default slots; a BatchBuffers
                to choose; False: fresh shared memory per batch, as torch's collate does).
            on_batch: called in the process that assembled each batch (a worker) with the batch and the seconds
                it took to produce; may add keys (instrumentation: the benchmark times the loader through it).
                Needs batches assembled by the dataset (no collate_fn, no image_transforms).
            batch_transform: called like `batch_transform(batch, epoch=epoch)` in the process that assembled each
                batch (a worker), before it is sent; returns the batch with camera tensors (or others) replaced
                by tensors of the same shapes and dtypes, written back in place: augmentations on whole batches,
                e.g. robostream.augment.BatchImageTransforms. Needs batches assembled by the dataset.
            kwargs: torch's DataLoader arguments (drop_last, pin_memory, prefetch_factor, ...). A collate_fn
                makes the dataset yield samples that it collates (the per-sample path).

        Without a collate_fn, workers assemble whole batches (datasets/batch_assembly.py): torch's DataLoader
        then iterates a view of the dataset's batches (`DatasetBatches`, whose `.dataset` is yours) with
        batch_size=None, while `batch_size` and `drop_last` here keep the values asked for. Batches are exactly
        torch's collate of the samples `for sample in dataset` yields.
        """
        if not isinstance(dataset, StreamingLeRobotDataset):
            raise TypeError("StreamingDataLoader needs a StreamingLeRobotDataset")
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True would keep workers on a stale epoch/resume state; leave it off")
        if kwargs.get("in_order") is False:
            raise ValueError("in_order=False makes the batch order (and so the resume position) nondeterministic")
        batch_size = dataset.batching.loader_batch_size(batch_size)  # the one place a loader's batch size is decided
        finite_number(batch_size, what="StreamingDataLoader batch_size", integer=True, minimum=1)
        drop_last = bool(kwargs.pop("drop_last", False))
        own_collate = kwargs.get("collate_fn") is None
        assembled = own_collate and dataset.assembles_batches
        dataset.batching.check_loader(drop_last=drop_last, assembled=assembled)
        if (on_batch is not None or batch_transform is not None) and not assembled:
            raise ValueError(
                "on_batch and batch_transform need batches assembled by the dataset: pass no "
                "collate_fn, and no image_transforms to the dataset"
            )
        if batch_buffers is True:
            batch_buffers = BatchBuffers.for_loader(kwargs.get("prefetch_factor"))
        self.batch_buffers = batch_buffers if batch_buffers and num_workers and own_collate else None
        self.streaming_dataset = dataset
        self._planned_batch_size: int = batch_size  # torch's batch_size attribute is typed optional
        if assembled:
            batching = LoaderBatching(
                batch_size,
                drop_last,
                self.batch_buffers,
                on_batch,
                batch_transform,
                views=not kwargs.get("pin_memory", False),
            )
            view = DatasetBatches(dataset, batching)
            super().__init__(view, batch_size=None, num_workers=num_workers, collate_fn=_assembled, **kwargs)
            # torch passes the dataset's batches through; users still see the batching they asked for.
            object.__setattr__(self, "batch_size", batch_size)
            object.__setattr__(self, "drop_last", drop_last)
        else:
            if self.batch_buffers is not None:
                kwargs["collate_fn"] = self.batch_buffers.collate
            elif own_collate:
                kwargs["collate_fn"] = collate_samples  # default_collate would transpose language columns
            super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last, **kwargs)
        self._batches = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # torch's returns its iterator class
        self._batches = 0
        batches = super().__iter__()
        for batch in batches if self.batch_buffers is None else self.batch_buffers.adopting(batches):
            self._batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The dataset position after the batches consumed so far in the current pass."""
        return self.streaming_dataset.state_dict(
            batches=self._batches, batch_size=self._planned_batch_size, num_workers=max(1, self.num_workers)
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streaming_dataset.load_state_dict(state)
        self._batches = 0


def _assembled(batch: Any) -> Any:
    """The collate of a loader whose dataset yields whole batches: nothing left to do."""
    return batch
