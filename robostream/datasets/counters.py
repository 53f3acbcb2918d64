"""Frame counters shared by a dataset and its DataLoader worker processes.

A small int64 tensor in shared memory, one row per worker (so no two processes write the same cell), created with
the dataset and inherited by forked workers (torch.multiprocessing shares it with spawned ones). The main process
sums the rows to report frames decoded vs delivered, the decoded-frame working set of live pieces, and each stage's
tasks, busy time and wait (stages.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from robostream.datasets.stages import STAGE_FIELDS, THREAD_FIELDS

MAX_WORKERS = 256
FIELDS = (
    "frames_decoded",
    "frames_delivered",
    "frames_decoded_gpu",  # frames of cameras asked on a GPU: decoded there (NVDEC)
    "frames_decoded_cpu_fallback",  # or on the CPU, where the GPU cannot decode the camera's codec
    "peak_piece_frames",
    "peak_live_frames",
    "peak_live_pieces",
    "bytes_read",
    "read_wait_us",
    "block_bytes_peak",
    "read_ahead_errors",
    "in_flight_peak",
    "evicted_unread",
    "reader_fetches",
    "retries",
    "throttled",
    *STAGE_FIELDS,  # per stage of the read path: tasks, busy and wait (stages.py), the loops' wall time
    *THREAD_FIELDS,
)
_COLUMN = {name: col for col, name in enumerate(FIELDS)}
_SUMMED = {
    "frames_decoded",
    "frames_delivered",
    "frames_decoded_gpu",
    "frames_decoded_cpu_fallback",
    "bytes_read",
    "read_wait_us",
    "read_ahead_errors",
    "evicted_unread",
    "reader_fetches",
    "retries",
    "throttled",
    *STAGE_FIELDS,
}


class FrameCounters:
    def __init__(self) -> None:
        self._table = torch.zeros((MAX_WORKERS, len(FIELDS)), dtype=torch.int64).share_memory_()

    @property
    def _cells(self) -> np.ndarray:
        """A numpy view of the shared table: element updates in the per-sample path cost ~1 us, not ~10 us."""
        return self._table.numpy()

    def add(self, worker: int, field: str, amount: int) -> None:
        self._cells[worker % MAX_WORKERS, _COLUMN[field]] += amount

    def set(self, worker: int, field: str, value: int) -> None:
        """Record a worker's running total (its own row only)."""
        self._cells[worker % MAX_WORKERS, _COLUMN[field]] = value

    def peak(self, worker: int, field: str, value: int) -> None:
        cells, row, col = self._cells, worker % MAX_WORKERS, _COLUMN[field]
        if value > cells[row, col]:
            cells[row, col] = value

    def record(
        self, worker: int, *, added: Iterable[tuple[str, int]] = (), peaks: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Several of a worker's counts at once (`add` of each of `added`, `peak` of each of `peaks`) through one
        view of the table: the stages' counts are published per batch, or per sample on the per-sample path."""
        cells, row = self._cells, worker % MAX_WORKERS
        for field, amount in added:
            cells[row, _COLUMN[field]] += amount
        for field, value in peaks:
            col = _COLUMN[field]
            if value > cells[row, col]:
                cells[row, col] = value

    def totals(self) -> dict[str, int]:
        """Decoded and delivered frames summed over workers; peaks as the largest of any worker."""
        out = {}
        for col, name in enumerate(FIELDS):
            column = self._table[:, col]
            out[name] = int(column.sum() if name in _SUMMED else column.max())
        return out

    def reset(self) -> None:
        self._table.zero_()
