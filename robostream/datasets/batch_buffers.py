"""Shared-memory batch buffers that DataLoader workers reuse instead of allocating for every batch.

Creating and first touching fresh shared memory for every batch (what torch's collate does in a worker) costs
about as much as copying the frames twice for camera batches (tens to hundreds of MiB). Here each worker keeps a
few shared-memory slots: the streaming dataset lays a whole batch out in a free one (`allocate`), and the
per-sample path collates the large tensors of a batch into one (`collate`).

A slot is reused only after the main process has dropped every tensor and view of the batch that used it: the main
process attaches a finalizer to the slot's storage when the batch arrives (`adopt`), and the finalizer marks the
slot free in a small table in shared memory. When no slot is free (the training loop still holds older batches, or
a batch was handed to yet another process), the worker allocates fresh shared memory, so it never waits. In the
per-sample path small tensors, strings and everything else go through the samples' collate unchanged
(datasets/collate.py: torch's `default_collate`, language columns kept as lists).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from robostream.datasets.collate import collate_samples
from robostream.process_local import ProcessLocal

SLOT_KEY = "_robostream_batch_slot"  # (worker, slot, pooled key) travelling with a pooled batch; removed by adopt
POOLED_MIN_BYTES = 1 << 20  # tensors of a batch at least this large are collated into a slot
ALIGN = 64
MAX_WORKERS = 256


class BatchBuffers:
    """Per-worker shared-memory slots for the large tensors of batches (see the module docstring)."""

    def __init__(self, slots: int = 4, min_bytes: int = POOLED_MIN_BYTES) -> None:
        """slots: reusable buffers per worker (a worker has up to prefetch_factor batches in flight, the training
        loop holds one or two more). min_bytes: a key is pooled when its stacked batch tensor is at least this big."""
        if slots < 1:
            raise ValueError(f"BatchBuffers needs at least one slot per worker, got {slots}")
        self.slots, self.min_bytes = slots, min_bytes
        # free[w, s]: 1 when slot s of worker w may be written; counts[w]: batches collated into a slot / fresh.
        self._free = torch.ones((MAX_WORKERS, slots), dtype=torch.uint8).share_memory_()
        self._counts = torch.zeros((MAX_WORKERS, 2), dtype=torch.int64).share_memory_()
        self._storages: ProcessLocal[dict[int, torch.UntypedStorage]] = ProcessLocal(dict)  # a worker's own slots

    @classmethod
    def for_loader(cls, prefetch_factor: int | None) -> BatchBuffers:
        """Enough slots for what a worker has in flight (prefetch_factor batches) plus what a training loop holds."""
        return cls(slots=(prefetch_factor or 2) + 2)

    def stats(self) -> dict[str, int]:
        """Batches collated into a reused or new slot, and batches that found no free slot."""
        counts = self._counts.numpy()
        return {"pooled_batches": int(counts[:, 0].sum()), "fresh_batches": int(counts[:, 1].sum())}

    # -- worker side -----------------------------------------------------------------------------------------
    def collate(self, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The samples' collate (collate_samples), with the large tensors written into a free slot of this
        worker."""
        large = _large_keys(samples, self.min_bytes)
        if get_worker_info() is None or not large:
            return collate_samples(samples)  # in-process batches need no shared memory
        specs = {k: ((len(samples), *samples[0][k].shape), samples[0][k].dtype) for k in large}
        tensors, marker = self.allocate(specs)
        batch = collate_samples([{k: v for k, v in s.items() if k not in large} for s in samples])
        for key, out in tensors.items():
            batch[key] = torch.stack([s[key] for s in samples], out=out)
        if marker is not None:
            batch[SLOT_KEY] = marker
        return batch

    def allocate(
        self, specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]]
    ) -> tuple[dict[str, torch.Tensor], tuple[int, int, str] | None]:
        """Uninitialised tensors of the given shapes and dtypes, laid out in one free slot of this worker, and
        the marker that goes into the batch under SLOT_KEY so the main process frees the slot once the batch is
        gone. Outside a worker, or with no slot free, fresh memory (shared in a worker) and no marker."""
        info = get_worker_info()
        if info is None:
            return {k: torch.empty(shape, dtype=dtype) for k, (shape, dtype) in specs.items()}, None
        worker = info.id % MAX_WORKERS
        free = self._free.numpy()[worker]
        # One read of the row: the main process marks slots free at any moment (never busy: only this worker does),
        # and numpy's nonzero fails if the row changes between its count and its fill.
        open_slots = np.flatnonzero(free.copy())
        layout, size = _layout(specs)
        if len(open_slots):
            slot = int(open_slots[0])
            storage = self._slot_storage(slot, size)
            free[slot] = 0
            self._counts.numpy()[worker, 0] += 1
        else:
            storage = torch.UntypedStorage._new_shared(max(size, 1))
            self._counts.numpy()[worker, 1] += 1
        return _tensors_in(storage, layout), ((worker, slot, next(iter(specs))) if len(open_slots) else None)

    def _slot_storage(self, slot: int, size: int) -> torch.UntypedStorage:
        storages = self._storages.get()
        storage = storages.get(slot)
        if storage is None or storage.nbytes() < size:
            storage = storages[slot] = torch.UntypedStorage._new_shared(size)
        return storage

    # -- main-process side -----------------------------------------------------------------------------------
    def adopt(self, batch: Any) -> Any:
        """Take the slot marker off a batch and free the slot once the batch's pooled storage is gone."""
        if not isinstance(batch, dict) or SLOT_KEY not in batch:
            return batch
        worker, slot, key = batch.pop(SLOT_KEY)
        # Storages keep one Python object while alive, so this fires after the last tensor or view is dropped.
        weakref.finalize(batch[key].untyped_storage(), _release, self._free, int(worker), int(slot))
        return batch

    def adopting(self, batches: Iterable[Any]) -> Iterator[Any]:
        for batch in batches:
            yield self.adopt(batch)


def _release(free: torch.Tensor, worker: int, slot: int) -> None:
    free.numpy()[worker, slot] = 1


def _large_keys(samples: Sequence[dict[str, Any]], min_bytes: int) -> list[str]:
    """Keys whose stacked tensor is large (cameras): the ones worth a reused buffer."""
    first = samples[0]
    if not isinstance(first, dict):
        return []
    return [
        k
        for k, v in first.items()
        if isinstance(v, torch.Tensor)
        and v.numel() * v.element_size() * len(samples) >= min_bytes
        and all(isinstance(s[k], torch.Tensor) and s[k].shape == v.shape and s[k].dtype == v.dtype for s in samples)
    ]


def shared_tensors(specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, torch.Tensor]:
    """Uninitialised tensors in one new shared-memory block: what a worker sends without a further copy."""
    layout, size = _layout(specs)
    return _tensors_in(torch.UntypedStorage._new_shared(max(size, 1)), layout)


def _tensors_in(
    storage: torch.UntypedStorage, layout: Mapping[str, tuple[int, torch.dtype, tuple[int, ...]]]
) -> dict[str, torch.Tensor]:
    return {
        key: torch.empty(0, dtype=dtype).set_(storage, offset // dtype.itemsize, shape, _contiguous_strides(shape))
        for key, (offset, dtype, shape) in layout.items()
    }


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of `shape` (an empty dimension counts as 1, as torch does)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _layout(
    specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
) -> tuple[dict[str, tuple[int, torch.dtype, tuple[int, ...]]], int]:
    """Byte offset, dtype and shape of each tensor inside a slot, and the bytes the slot needs."""
    layout, offset = {}, 0
    for key, (shape, dtype) in specs.items():
        layout[key] = (offset, dtype, tuple(shape))
        offset += -(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // ALIGN) * ALIGN
    return layout, offset
