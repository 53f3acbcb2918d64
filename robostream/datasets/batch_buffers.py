"""Shared-memory batch buffers that DataLoader workers reuse instead of allocating for every batch.

Creating and first touching fresh shared memory for every batch (what torch's collate does in a worker) costs
about as much as copying the frames twice for camera batches (tens to hundreds of MiB). Here each worker keeps a
few shared-memory slots: the streaming dataset lays a whole batch out in a free one (`allocate`), and the
per-sample path collates the large tensors of a batch into one (`collate`).

A slot is reused only after the main process has dropped every tensor and view of the batch that used it: the main
process attaches a finalizer to the batch's storage when the batch arrives (`adopt`), and the finalizer marks the
slot free in a small table in shared memory.

A whole batch in a slot (the streaming path without pin_memory) travels as where its tensors lie in the slot
(`SlotTensor`), not as tensors: sending a shared tensor passes its file descriptor through a socket every time,
and the receiver maps the slot anew and faults its pages in again on first touch (0.3 ms of the main process and
0.5 ms of the worker per batch here, plus ~0.15 ms per MiB the training loop reads; BENCHMARKS.md). The main
process maps each slot once: the worker sends the slot's storage with a batch until the main process's table says
it holds that storage (`_mapped`, a token per storage), and each batch's tensors are views of a storage object of
their own over that mapping (its finalizer frees the slot as above). Batches travel as tensors where nothing would
turn them back: with pin_memory (torch's pinning thread needs tensors), and while no iteration of the loader's own
is adopting (`_adopting`: a loader iterated as a plain DataLoader, e.g. a copy made by accelerate's prepare).

When no slot is free (the training loop still holds older batches, or a batch was handed to yet another process),
the worker allocates fresh shared memory, so it never waits. In the per-sample path small tensors, strings and
everything else go through the samples' collate unchanged (datasets/collate.py: torch's `default_collate`,
language columns kept as lists).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from robostream.datasets.collate import collate_samples
from robostream.process_local import ProcessLocal

SLOT_KEY = "_robostream_batch_slot"  # the SlotMarker travelling with a batch in a slot; removed by adopt
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
        # mapped[w, s]: the token of slot s of worker w's storage that the main process holds mapped (0: none).
        self._mapped = torch.zeros((MAX_WORKERS, slots), dtype=torch.int64).share_memory_()
        # Iterations adopting batches now: only they turn SlotTensors back into tensors (a loader iterated some other
        # way, e.g. a copy made by accelerate's prepare, gets its batches as tensors).
        self._adopting = torch.zeros(1, dtype=torch.int64).share_memory_()
        # A worker's own slots: slot -> (token, storage); a new storage gets a new token.
        self._storages: ProcessLocal[dict[int, tuple[int, torch.UntypedStorage]]] = ProcessLocal(dict)

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
        tensors, slot = self.allocate(specs)
        batch = collate_samples([{k: v for k, v in s.items() if k not in large} for s in samples])
        for key, out in tensors.items():
            batch[key] = torch.stack([s[key] for s in samples], out=out)
        return batch if slot is None else self.send(batch, slot, views=False)

    def allocate(
        self, specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]]
    ) -> tuple[dict[str, torch.Tensor], int | None]:
        """Uninitialised tensors of the given shapes and dtypes, laid out in one free slot of this worker, and the
        slot (hand the batch to `send` with it, so the main process frees the slot once the batch is gone).
        Outside a worker, or with no slot free, fresh memory (shared in a worker) and no slot."""
        info = get_worker_info()
        if info is None:
            return {k: torch.empty(shape, dtype=dtype) for k, (shape, dtype) in specs.items()}, None
        worker = _worker_id()
        free = self._free.numpy()[worker]
        # One read of the row: the main process marks slots free at any moment (never busy: only this worker does),
        # and numpy's nonzero fails if the row changes between its count and its fill.
        open_slots = np.flatnonzero(free.copy())
        layout, size = _layout(specs)
        if not len(open_slots):
            self._counts.numpy()[worker, 1] += 1
            return _tensors_in(torch.UntypedStorage._new_shared(max(size, 1)), layout), None
        slot = int(open_slots[0])
        storage = self._slot_storage(slot, size)
        free[slot] = 0
        self._counts.numpy()[worker, 0] += 1
        return _tensors_in(storage, layout), slot

    def _slot_storage(self, slot: int, size: int) -> torch.UntypedStorage:
        storages = self._storages.get()
        token, storage = storages.get(slot, (0, None))
        if storage is None or storage.nbytes() < size:
            token = int.from_bytes(os.urandom(8), "little") >> 1 or 1  # a positive int64, never 0 (none)
            storage = torch.UntypedStorage._new_shared(max(size, 1))
            storages[slot] = (token, storage)
        return storage

    def send(self, batch: dict[str, Any], slot: int, *, views: bool) -> dict[str, Any]:
        """Mark a batch written in `slot` of this worker for the main process (SLOT_KEY): views: its tensors in
        the slot replaced by where they lie (`SlotTensor`), the slot's storage included until the main process
        holds it mapped; else tensors as they are (the main process watches the first one's storage)."""
        worker = _worker_id()
        token, storage = self._storages.get()[slot]
        where = storage.data_ptr()
        in_slot = [key for key, value in batch.items() if _in_slot(value, where)]
        # Tensors of the slot inside lists or dicts (a hook's views) travel as tensors; the batch then does too, so
        # that one storage (the watched key's) stands for every tensor of the slot in the main process.
        nested = any(_holds(value, where) for value in batch.values() if not isinstance(value, torch.Tensor))
        if not in_slot:
            if nested:
                raise ValueError(
                    "a batch hook left tensors of the batch's buffer only inside lists or dicts: keep one at the top "
                    "level of the batch, or copy them"
                )
            self._free.numpy()[worker, slot] = 1  # nothing of the batch was left in the slot
            return batch
        if not views or nested or not int(self._adopting[0]):
            batch[SLOT_KEY] = SlotMarker(worker, slot, token, key=in_slot[0], storage=None)
            return batch
        for key in in_slot:
            value = batch[key]
            batch[key] = SlotTensor(
                value.storage_offset() * value.element_size(), value.dtype, value.shape, value.stride()
            )
        mapped = int(self._mapped[worker, slot]) == token
        batch[SLOT_KEY] = SlotMarker(worker, slot, token, key=None, storage=None if mapped else storage)
        return batch

    # -- main-process side -----------------------------------------------------------------------------------
    def adopting(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The batches of one iteration of a loader (its own workers), adopted; the slots it mapped are let go
        when it ends (batches still held keep theirs)."""
        mapped: dict[int, tuple[int, int, np.ndarray]] = {}  # token -> (worker, slot, the slot's bytes)
        self._adopting += 1
        try:
            for batch in batches:
                yield self.adopt(batch, mapped)
        finally:
            self._adopting -= 1
            table = self._mapped.numpy()
            for token, (worker, slot, _) in mapped.items():
                if table[worker, slot] == token:
                    table[worker, slot] = 0

    def adopt(self, batch: Any, mapped: dict[int, tuple[int, int, np.ndarray]]) -> Any:
        """Take the slot marker off a batch, make its tensors of its slot (`mapped`: the slots this iteration
        holds, by token), and free the slot once the batch's storage is gone."""
        if not isinstance(batch, dict) or SLOT_KEY not in batch:
            return batch
        marker: SlotMarker = batch.pop(SLOT_KEY)
        if marker.key is not None:
            storage = batch[marker.key].untyped_storage()
        else:
            if marker.storage is not None:
                # A grown slot is a new storage: let the old one go (batches still held keep it).
                for old in [t for t, (w, s, _) in mapped.items() if (w, s) == (marker.worker, marker.slot)]:
                    del mapped[old]
                mapped[marker.token] = (marker.worker, marker.slot, _bytes_of(marker.storage))
                self._mapped[marker.worker, marker.slot] = marker.token
            if marker.token not in mapped:
                raise RuntimeError(
                    f"a batch in slot {marker.slot} of DataLoader worker {marker.worker} came without the slot, which "
                    "this iteration does not hold: a robostream bug, please report it"
                )
            # A storage object of this batch's own over the mapped slot: its finalizer tells when the batch is gone.
            storage = torch.frombuffer(_buffer(mapped[marker.token][2]), dtype=torch.uint8).untyped_storage()
            for key, value in batch.items():
                if isinstance(value, SlotTensor):
                    batch[key] = torch.empty(0, dtype=value.dtype).set_(
                        storage, value.offset // value.dtype.itemsize, value.shape, value.stride
                    )
        # Storages keep one Python object while alive, so this fires after the last tensor or view is dropped.
        weakref.finalize(storage, _release, self._free, marker.worker, marker.slot)
        return batch


@dataclass(frozen=True)
class SlotTensor:
    """A batch tensor sent as where it lies in its slot (the main process maps the slot once)."""

    offset: int  # bytes from the slot's start
    dtype: torch.dtype
    shape: torch.Size
    stride: tuple[int, ...]


@dataclass(frozen=True)
class SlotMarker:
    """What travels with a batch in a slot (under SLOT_KEY): which slot, and how its tensors come."""

    worker: int
    slot: int
    token: int  # names the slot's storage: a worker's new storage gets a new one
    key: str | None  # tensors sent as tensors: the key whose storage the main process watches; None: SlotTensors
    storage: torch.UntypedStorage | None  # the slot, sent until the main process holds it mapped (SlotTensors)


def _in_slot(value: Any, where: int) -> bool:
    return isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() == where


def _holds(value: Any, where: int) -> bool:
    """Whether a list, tuple or dict (at any depth) holds a tensor of the storage at `where`."""
    if isinstance(value, Mapping):
        return any(_holds(v, where) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, where) for v in value)
    return _in_slot(value, where)


def _worker_id() -> int:
    info = get_worker_info()
    if info is None:
        raise RuntimeError("batch slots belong to DataLoader workers")
    return info.id % MAX_WORKERS


def _bytes_of(storage: torch.UntypedStorage) -> np.ndarray:
    """The storage's bytes as a numpy array (which keeps the storage alive)."""
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


def _buffer(array: np.ndarray) -> memoryview:
    """A new buffer object over the array's bytes, which keeps the array alive."""
    return memoryview(array)  # type: ignore[arg-type]  # numpy arrays are buffers; numpy's stubs say otherwise


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
