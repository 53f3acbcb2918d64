"""Reading: what one dataset reads with in each process, one object for all of its sources.

A dataset's reading arguments are frozen in `ReadingSettings`; the resources they are read with live in `Reading`,
one per dataset (a plain dataset is a mixture of one source: the same decoders, pools and counters), so decoders,
open data files, threads and fetched bytes grow with the pieces being read, not with the sources. Each
resource that must not cross a fork (threads, open files, clients) is a ProcessLocal, rebuilt in every process that
uses it (process_local.py); the frame counters are shared memory on purpose, so the main process sums its workers'.

Readers (camera, frame, pick read-ahead) and the epoch iterator receive the Reading; nothing reaches a process
service through a source.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import torch
from torch.utils.data import get_worker_info

from robostream.datasets.counters import FrameCounters
from robostream.datasets.stages import FIGURE_FIELDS, TIMED_THREAD_FIELDS, StagePool, StageTimes
from robostream.format.data_rows import RowCaches
from robostream.format.depth import DEFAULT_DEPTH_UNIT, DepthUnit
from robostream.numbers import finite_number
from robostream.process_local import ProcessLocal
from robostream.storage.options import ReadOptions
from robostream.storage.store import SharedReading, Storage
from robostream.video.cache import VideoDecoderCache
from robostream.video.layout import FramePool
from robostream.video.options import DEFAULT_DECODE_DEVICE, GpuFallback

ROW_THREADS = 16  # episodes' rows read at once ahead of their pieces (remote data: a round trip each)
DECODE_THREADS = 16  # decode threads per process at most (fewer when workers fill the cores; started as needed)
INDEX_THREADS = 8  # camera files' packet indexes read at once (a round trip or two each)
STREAMING_DECODERS = 8  # open decoders a streaming dataset keeps per process beyond those of its live pieces


@dataclass(frozen=True, kw_only=True)
class ReadingSettings:
    """A dataset's reading arguments (see StreamingLeRobotDataset and LeRobotDataset for each).

    Args:
        read_options: how bytes are read (a source's own read_options win).
        delta_timestamps: windows per key, in seconds (a mixture: common key names).
        tolerance_s: how far a decoded frame's time may be from the asked one.
        return_uint8: keep cameras uint8.
        image_transforms: applied to every camera tensor (None: batches are assembled whole).
        depth_output_unit: the unit of depth cameras.
        video_backend: "torchcodec" or "pyav" (None: the default backend).
        decode_device: where videos are decoded (DecodeOptions.device): "cpu", or "cuda"/"cuda:N".
        decode_gpu_fallback: a camera the GPU cannot decode: "cpu" or "error" (DecodeOptions.gpu_fallback).
        decode_ahead: samples of a piece whose missing frames are decoded together (None: by each source's frame
            size, StreamOptions.decode_ahead).
        prefetch: read the rows of upcoming pieces and the video bytes of upcoming picks ahead (remote data).
        shuffle: pieces read by residue class of their window stride (random order) or forward.
    """

    read_options: ReadOptions | None = None
    delta_timestamps: Mapping[str, Sequence[float]] = field(default_factory=dict)
    tolerance_s: float = 1e-4
    return_uint8: bool = False
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None
    depth_output_unit: DepthUnit = DEFAULT_DEPTH_UNIT
    video_backend: Literal["torchcodec", "pyav"] | None = None
    decode_device: str = DEFAULT_DECODE_DEVICE
    decode_gpu_fallback: GpuFallback = "cpu"
    decode_ahead: int | None = None
    prefetch: bool = True
    shuffle: bool = True

    def __post_init__(self) -> None:
        finite_number(self.tolerance_s, what="tolerance_s", minimum=0)


class Reading:
    """One dataset's reading in every process: its settings and the process-local resources its sources share."""

    def __init__(self, settings: ReadingSettings, *, decoders_kept: int) -> None:
        """
        Args:
            settings: the dataset's reading arguments.
            decoders_kept: open decoders kept per process beyond those the live pieces hold (VideoDecoderCache.hold).
        """
        self.settings = settings
        self.counters = FrameCounters()  # shared memory: every worker writes its own row
        self.decoders = VideoDecoderCache(decoders_kept)  # files named by their full location
        self.frame_pool = ProcessLocal(FramePool)  # frames given back by the batch path, decoded into again
        self.decode_threads = ProcessLocal(partial(decode_pool, DECODE_THREADS))  # None: no core to spare
        self.row_caches = ProcessLocal(RowCaches)  # data-file footers and rows read ahead
        self.stage_times = ProcessLocal(StageTimes)  # per stage: tasks, busy and wait in this process (stages.py)
        self.row_threads = ProcessLocal(partial(StagePool, ROW_THREADS, stage="rows", times=self.stage_times))
        self.index_threads = ProcessLocal(
            partial(ThreadPoolExecutor, INDEX_THREADS, thread_name_prefix="robostream-index")
        )  # packet indexes of camera files
        self.read_ahead_failures = ProcessLocal(Tally)  # camera files whose packet index could not be read
        self.shared_reading = SharedReading()  # remote clients, fetched blocks and read-ahead
        self.storages: list[Storage] = []  # every source's data storage (the byte counters cover all)

    def add_storage(self, storage: Storage) -> None:
        """A source opened: its data storage's reads count in this dataset's (appended before any fork)."""
        self.storages.append(storage)

    def count_reads(self, worker: int) -> None:
        """Record this process's reads of every source's remote data in the worker's row of the counters."""
        remote = [storage for storage in self.storages if not storage.is_local]
        if not remote:
            return
        stats = [storage.stats() for storage in remote]
        # Blocks and read-ahead may be shared by several storages (SharedReading): count each once.
        shared = list({id(storage.blocks): s for storage, s in zip(remote, stats)}.values())
        counters = self.counters
        counters.set(worker, "bytes_read", sum(s.bytes_read for s in stats))
        counters.set(worker, "fetch_tasks", sum(s.requests for s in stats))
        counters.set(worker, "fetch_busy_us", int(sum(s.requests_s for s in stats) * 1e6))
        counters.set(worker, "fetch_threads", sum(s.max_in_flight for s in shared))
        counters.set(worker, "read_wait_us", int(sum(s.wait_s for s in shared) * 1e6))
        counters.set(worker, "block_bytes_peak", sum(s.block_bytes_peak for s in shared))
        counters.set(worker, "in_flight_peak", max(s.in_flight_peak for s in shared))
        counters.set(worker, "evicted_unread", sum(s.evicted_unread for s in shared))
        counters.set(worker, "reader_fetches", sum(s.reader_fetches for s in shared))
        counters.set(worker, "retries", sum(s.retries for s in stats))
        counters.set(worker, "throttled", sum(s.throttled for s in stats))
        counters.set(
            worker,
            "read_ahead_errors",
            self.read_ahead_failures.get().count + sum(s.read_ahead_failures for s in shared),
        )

    def count_stages(self, worker: int) -> None:
        """Add what this process's stages did since the last call to the worker's row of the counters (added, not
        set: a worker of a later epoch is a new process whose totals start again)."""
        new, wall_us, threads = self.stage_times.get().unpublished()
        added = [("worker_wall_us", wall_us)]
        added += [(name, amount) for names, figures in zip(FIGURE_FIELDS, new) for name, amount in zip(names, figures)]
        self.counters.record(worker, added=[(n, a) for n, a in added if a], peaks=zip(TIMED_THREAD_FIELDS, threads))


class Tally:
    """A count kept by one process, added to from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self.count += amount


def decode_pool(cameras: int) -> ThreadPoolExecutor | None:
    """Decode threads for this process, or None when it has no core to spare for them."""
    threads = decode_threads(cameras)
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="robostream-decode") if threads > 1 else None


def decode_threads(cameras: int) -> int:
    """Threads that decode a sample's cameras in parallel: one per camera while this process has cores to spare.

    DataLoader workers already run in parallel; when they occupy every core, threads inside a worker only add
    hand-off costs (and torchcodec holds the GIL for part of each call), so a worker then decodes its cameras in turn.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    info = get_worker_info()
    processes = info.num_workers if info is not None else 1
    return max(1, min(cameras, cores // processes))
