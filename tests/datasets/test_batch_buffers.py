"""Reused shared-memory batch buffers: the same batches as torch's collate, and never a batch overwritten while the
training loop still holds it or a view of it (real DataLoader worker processes)."""

import multiprocessing

import torch
import torch.multiprocessing.reductions

from robostream import StreamingDataLoader, StreamingLeRobotDataset
from robostream.datasets.batch_buffers import BatchBuffers
from tests.helpers import assert_same_sample

CAMERA = "observation.images.cam0"


def _loader(root, buffers, workers=2, **kwargs):
    dataset = StreamingLeRobotDataset(root=root, return_uint8=True, delta_timestamps={CAMERA: [-0.1, 0.0]})
    return StreamingDataLoader(dataset, batch_size=4, num_workers=workers, batch_buffers=buffers, **kwargs)


def test_pooled_batches_equal_torch_collate(av1_root):
    # The fixture's frames are small: pool every tensor key. 8 slots: more than a worker ever has in flight.
    buffers = BatchBuffers(slots=8, min_bytes=1)
    pooled = [
        {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in _loader(av1_root, buffers)
    ]
    plain = list(_loader(av1_root, False))
    assert len(pooled) == len(plain) > 10
    for a, b in zip(pooled, plain):
        assert_same_sample(a, b)
    assert buffers.stats()["pooled_batches"] == len(plain) and buffers.stats()["fresh_batches"] == 0


def test_spawned_workers_reuse_slots_too(av1_root):
    """GPU decoding needs spawned workers: the slot table and the buffers must survive pickling."""
    buffers = BatchBuffers(slots=8, min_bytes=1)
    loader = _loader(av1_root, buffers, workers=1, multiprocessing_context="spawn")
    pooled = [b["index"].tolist() for b in loader]
    assert pooled == [b["index"].tolist() for b in _loader(av1_root, False, workers=1)]
    assert buffers.stats()["pooled_batches"] == len(pooled) and buffers.stats()["fresh_batches"] == 0


def test_held_batches_are_never_overwritten(av1_root):
    buffers = BatchBuffers(slots=2, min_bytes=1)
    held, snapshots = [], []
    for batch in _loader(av1_root, buffers, workers=1):
        held.append(batch)  # a training loop that keeps every batch: no slot ever comes free
        snapshots.append(batch[CAMERA].clone())
    for batch, snapshot in zip(held, snapshots):
        assert torch.equal(batch[CAMERA], snapshot)
    stats = buffers.stats()
    assert stats["pooled_batches"] == 2 and stats["fresh_batches"] == len(held) - 2


def test_a_view_keeps_its_slot_busy(av1_root):
    buffers = BatchBuffers(slots=4, min_bytes=1)
    kept = snapshot = None
    count = 0
    for batch in _loader(av1_root, buffers, workers=1):
        if kept is None:
            kept = batch[CAMERA][1]  # a view into the first batch's slot outlives the batch
            snapshot = kept.clone()
        count += 1
        del batch
    assert torch.equal(kept, snapshot)
    stats = buffers.stats()
    assert count > 20 and stats["pooled_batches"] > count // 2  # the other slots were reused over and over


_REBUILD = torch.multiprocessing.reductions.rebuild_storage_fd
_RECEIVED: list[int] = []  # storages the main process received (the patched rebuild below)


def _counting_rebuild(*args):
    _RECEIVED.append(1)
    return _REBUILD(*args)


def test_each_slot_crosses_to_the_main_process_once(av1_root, monkeypatch):
    """A batch in a slot travels as where its tensors lie: the main process receives a slot's storage (a file
    descriptor passed through a socket, mapped anew) once per worker and slot, not once per batch (it was)."""
    received = _RECEIVED
    # Patched before the workers fork: their pickles name the module-level function, which the main process runs.
    monkeypatch.setattr(torch.multiprocessing.reductions, "rebuild_storage_fd", _counting_rebuild)
    buffers = BatchBuffers(slots=4, min_bytes=1)
    loader = _loader(av1_root, buffers)
    for epoch in range(2):  # each pass has workers of its own: their slots cross again, once
        received.clear()
        batches = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]
        assert len(batches) > 20 and len(received) <= 2 * 4, (epoch, len(received))
        for a, b in zip(batches, _loader(av1_root, False)):
            assert_same_sample(a, b)


def test_a_batch_held_past_its_pass_keeps_its_values(av1_root):
    """A batch's tensors keep its slot's memory mapped after the pass that made it (and its workers) ended."""
    loader = _loader(av1_root, BatchBuffers(slots=4, min_bytes=1))
    first = next(iter(loader))
    snapshot = first[CAMERA].clone()
    assert sum(1 for _ in loader) > 20  # a whole new pass, new workers, their own slots
    assert torch.equal(first[CAMERA], snapshot)


def test_pinned_batches_travel_as_tensors(av1_root):
    """With pin_memory torch's pinning thread handles the batch before it is adopted: it must hold tensors."""
    loader = _loader(av1_root, BatchBuffers(slots=4, min_bytes=1), pin_memory=True)
    assert loader.dataset.batching.views is False
    assert [b["index"].tolist() for b in loader] == [b["index"].tolist() for b in _loader(av1_root, False)]


def test_a_loader_iterated_without_adopting_gets_tensors(av1_root):
    """Iterated as a plain DataLoader (what a copy made by accelerate's prepare does), nothing turns places in a
    slot back into tensors: such batches travel as tensors."""
    loader = _loader(av1_root, BatchBuffers(slots=4, min_bytes=1))
    batches = list(torch.utils.data.DataLoader.__iter__(loader))
    assert len(batches) > 10 and all(isinstance(b[CAMERA], torch.Tensor) for b in batches)
    assert [b["index"].tolist() for b in batches] == [b["index"].tolist() for b in _loader(av1_root, False)]


def _nest_a_view(batch, seconds):
    batch["thumbs"] = [batch[CAMERA][:, 0]]  # a hook's view of the slot inside a list


def test_a_view_a_hook_nests_in_a_list_keeps_its_slot_busy(av1_root):
    """Only the batch's top-level tensors travel as places in the slot: a view inside a list would arrive as a
    tensor the slot's release does not wait for, so such batches travel as tensors (one storage for all)."""
    buffers = BatchBuffers(slots=4, min_bytes=1)
    kept = snapshot = None
    count = 0
    for batch in _loader(av1_root, buffers, workers=1, on_batch=_nest_a_view):
        assert torch.equal(batch["thumbs"][0], batch[CAMERA][:, 0])
        if kept is None:
            kept = batch["thumbs"][0]
            snapshot = kept.clone()
        count += 1
        del batch
    assert torch.equal(kept, snapshot)
    assert count > 20 and buffers.stats()["pooled_batches"] > count // 2


def test_in_process_loading_uses_torch_collate(av1_root):
    loader = _loader(av1_root, True, workers=0)
    assert loader.batch_buffers is None and next(iter(loader))[CAMERA].shape == (4, 2, 3, 64, 64)


class _AllocatingDataset(torch.utils.data.IterableDataset):
    """A worker that allocates (and itself frees) slot after slot, yielding the slots it got."""

    def __init__(self, buffers: BatchBuffers, allocations: int) -> None:
        self.buffers, self.allocations = buffers, allocations

    def __iter__(self):
        slots = []
        worker = torch.utils.data.get_worker_info().id
        for _ in range(self.allocations):
            _, slot = self.buffers.allocate({"x": ((2,), torch.uint8)})
            slots.append(slot)
            if slot is not None:
                self.buffers._free.numpy()[worker, slot] = 1
        yield slots


def _release_forever(free: torch.Tensor, stop) -> None:
    # What the main process's finalizers do, as fast as possible: mark slots 1.. of worker 0 free (and busy again, so
    # the flag keeps changing; the worker never gets those slots as long as slot 0 is free).
    row = free.numpy()[0]
    while not stop.is_set():
        row[1:] = 1
        row[1:] = 0


def test_allocate_while_the_main_process_releases_slots():
    """The free table is read once per allocation: a release landing in the middle of the read (another process)
    neither breaks the read nor hands out a slot twice. Without the snapshot this failed within 2000 allocations."""
    buffers = BatchBuffers(slots=6)
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    releaser = context.Process(target=_release_forever, args=(buffers._free, stop), daemon=True)
    releaser.start()
    try:
        slots = next(
            iter(torch.utils.data.DataLoader(_AllocatingDataset(buffers, 5000), num_workers=1, batch_size=None))
        )
    finally:
        stop.set()
        releaser.join()
    assert slots == [0] * 5000
