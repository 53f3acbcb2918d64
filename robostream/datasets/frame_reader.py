"""Rows and frames of pieces: what turns a streaming consumer's picks (piece, position) into samples.

A piece's data rows are read when it goes live, in the process that owns it (format/data_rows.py); its frames are
decoded in look-ahead batches and kept only while a later sample needs them (piece_reader.py). For remote data
the rows of the pieces that go live next are read ahead in a background thread, and the video bytes of the next
picks are fetched ahead (pick_read_ahead.py, video_read_ahead.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from robostream.datasets.batch_assembly import Allocate, BatchAssembler
from robostream.datasets.cameras import CameraReader
from robostream.datasets.counters import FrameCounters
from robostream.datasets.piece_reader import PieceReader
from robostream.datasets.sample import SampleAssembler, stack_window
from robostream.datasets.video_read_ahead import VideoReadAhead, index_threads
from robostream.format.data_rows import DataRowReader, EpisodeRows, RowCaches
from robostream.format.metadata import DatasetMetadata
from robostream.plan.schedule import piece_sample_order
from robostream.process_local import ProcessLocal
from robostream.storage.store import Storage

ROW_THREADS = 16  # episodes' rows read at once ahead of their pieces (remote data: a round trip each)


@dataclass(frozen=True)
class ReadingThreads:
    """Per-process caches and threads of the frame readers (each a ProcessLocal: rebuilt after a fork), one set
    for all the sources of a mixture."""

    row_caches: ProcessLocal = field(default_factory=lambda: ProcessLocal(RowCaches))
    row_threads: ProcessLocal = field(
        default_factory=lambda: ProcessLocal(
            partial(ThreadPoolExecutor, ROW_THREADS, thread_name_prefix="robostream-rows")
        )
    )
    index_threads: ProcessLocal = field(default_factory=lambda: ProcessLocal(index_threads))


class FrameReader:
    """Opens pieces (episode, first frame, stop frame) and assembles their samples, counting frames per worker."""

    def __init__(
        self,
        meta: DatasetMetadata,
        *,
        assembler: SampleAssembler,
        cameras: CameraReader,
        counters: FrameCounters,
        stride: int,
        decode_ahead: int,
        prefetch: bool,
        index: int = 0,
        storages: Sequence[Storage] | None = None,
        shared: ReadingThreads | None = None,
    ) -> None:
        """
        Args:
            meta: the dataset's metadata.
            assembler: windows and sample layout (shared with the map-style dataset).
            cameras: the decoders of this process.
            counters: frame counters shared with the DataLoader workers.
            stride: a piece's samples are visited by residue class of this stride (overlapping windows).
            decode_ahead: samples whose missing frames are decoded in one call.
            prefetch: fetch the rows of upcoming pieces and the video bytes of upcoming picks ahead (remote data).
            index: the source this reads in a mixture (its pieces' readers carry it).
            storages: where every source of the dataset reads its data (a list the sources of a mixture share,
                so a worker's byte counters cover all of them); default: this source's.
            shared: the per-process caches and threads that the sources of a mixture share (open data files,
                rows read ahead, packet-index threads), so they grow with the live pieces, not with the sources;
                default: this reader's own.
        """
        self.meta = meta
        self.index = index
        self.storages = storages if storages is not None else [meta.data_storage]
        self.assembler = assembler
        # Batches are assembled whole unless transforms must see each sample (then: samples + collate).
        self.batches = BatchAssembler(assembler) if assembler.image_transforms is None else None
        self.cameras = cameras
        self.counters = counters
        self.stride = stride
        self.decode_ahead = decode_ahead
        remote = prefetch and not meta.data_storage.is_local
        shared = shared or ReadingThreads()
        self.rows = DataRowReader(
            meta, read_ahead_threads=ROW_THREADS if remote else 0, caches=shared.row_caches, threads=shared.row_threads
        )
        self.video_ahead = VideoReadAhead(meta, enabled=prefetch, threads=shared.index_threads)

    def open_piece(self, episode: int, first: int, stop: int, worker: int) -> PieceReader:
        rows = self.rows.episode(episode)
        frames = piece_sample_order(first, stop, self.stride)
        return PieceReader(
            rows,
            frames,
            self.assembler.camera_window_frames(frames, len(rows)),
            partial(self._decode, worker),
            self.decode_ahead,
            source=self.index,
        )

    def sample(
        self, reader: PieceReader, position: int, frames: Mapping[str, Sequence[torch.Tensor]], worker: int
    ) -> dict[str, Any]:
        """The sample at `position` of a piece; frames: its window frames per camera (PieceReader.window_frames)."""
        video = {key: stack_window(window) for key, window in frames.items()}
        self.count(worker, [frames])
        return self.assembler.assemble(reader.rows, int(reader.sample_frames[position]), video)

    def batch(
        self,
        refs: Sequence[tuple[PieceReader, int]],
        frames: Sequence[Mapping[str, Sequence[torch.Tensor]]],
        worker: int,
        allocate: Allocate,
    ) -> dict[str, Any]:
        """The batch of several samples, as torch's collate of their `sample`s would give it."""
        self.count(worker, frames)
        rows = [(reader.rows, int(reader.sample_frames[position])) for reader, position in refs]
        return self.batches.assemble(rows, frames, allocate)

    def prefill(self, refs: Sequence[tuple[PieceReader, int]], worker: int) -> None:
        """Decode what the batch's pieces miss, with their look-ahead, in one decoder call per camera file
        (instead of one per piece and camera): each piece's first sample in the batch decides its frames."""
        requests, seen = [], set()
        for reader, position in refs:
            if id(reader) not in seen:
                seen.add(id(reader))
                wanted = reader.missing(position)
                if wanted:
                    requests.append((reader, wanted))
        if not requests:
            return
        self.counters.add(worker, "frames_decoded", sum(len(f) for _, w in requests for f in w.values()))
        decoded = self.cameras.decode_episodes(
            [
                (reader.rows.episode, {k: self.assembler.timestamps(reader.rows, f) for k, f in wanted.items()})
                for reader, wanted in requests
            ],
            pooled=True,
        )
        for (reader, wanted), frames in zip(requests, decoded):
            reader.add(wanted, frames)

    def count(self, worker: int, frames: Sequence[Mapping[str, Sequence[torch.Tensor]]]) -> None:
        """Count the frames delivered to samples and, for remote data, this process's bytes read."""
        self.count_frames(worker, frames)
        self.count_reads(worker)

    def count_frames(self, worker: int, frames: Sequence[Mapping[str, Sequence[torch.Tensor]]]) -> None:
        """Count the frames delivered to samples."""
        if self.meta.video_keys:
            self.counters.add(worker, "frames_delivered", sum(len(w) for f in frames for w in f.values()))

    def count_reads(self, worker: int) -> None:
        """Record this process's reads of every source's remote data (once per batch: the storages are all the
        sources' of a mixture)."""
        remote = [storage for storage in self.storages if not storage.is_local]
        if remote:
            stats = [storage.stats() for storage in remote]
            # Blocks and read-ahead may be shared by several storages (a mixture's): count each once.
            shared = list({id(storage.blocks): s for storage, s in zip(remote, stats)}.values())
            self.counters.set(worker, "bytes_read", sum(s.bytes_read for s in stats))
            self.counters.set(worker, "read_wait_us", int(sum(s.wait_s for s in shared) * 1e6))
            self.counters.set(worker, "block_bytes_peak", sum(s.block_bytes_peak for s in shared))
            self.counters.set(worker, "in_flight_peak", max(s.in_flight_peak for s in shared))
            self.counters.set(worker, "evicted_unread", sum(s.evicted_unread for s in shared))
            self.counters.set(worker, "reader_fetches", sum(s.reader_fetches for s in shared))
            self.counters.set(
                worker, "read_ahead_errors", self.video_ahead.errors + sum(s.read_ahead_failures for s in shared)
            )

    def _decode(
        self, worker: int, rows: EpisodeRows, frames_by_key: Mapping[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        self.counters.add(worker, "frames_decoded", sum(len(f) for f in frames_by_key.values()))
        return self.cameras.decode_many(
            rows.episode, {k: self.assembler.timestamps(rows, f) for k, f in frames_by_key.items()}
        )
