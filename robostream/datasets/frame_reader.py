"""Rows and frames of pieces: what turns a streaming consumer's picks (piece, position) into samples.

A piece's data rows are read when it goes live, in the process that owns it (format/data_rows.py); its frames are
decoded in look-ahead batches and kept only while a later sample needs them (piece_reader.py). For remote data
the rows of the pieces that go live next are read ahead in a background thread, and the video bytes of the next
picks are fetched ahead (pick_read_ahead.py, video_read_ahead.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from robostream.datasets.batch_assembly import Allocate, BatchAssembler
from robostream.datasets.cameras import CameraReader
from robostream.datasets.piece_reader import PieceReader
from robostream.datasets.reading import ROW_THREADS, Reading
from robostream.datasets.sample import SampleAssembler, stack_window
from robostream.datasets.stream_options import default_decode_ahead
from robostream.datasets.video_read_ahead import VideoReadAhead
from robostream.format.data_rows import DataRowReader, EpisodeRows
from robostream.format.metadata import DatasetMetadata
from robostream.plan.piece import NO_WINDOW, PieceGeometry, piece_geometry
from robostream.plan.schedule import window_stride


class FrameReader:
    """Opens pieces (episode, first frame, stop frame) and assembles their samples, counting frames per worker."""

    def __init__(
        self, meta: DatasetMetadata, *, assembler: SampleAssembler, cameras: CameraReader, index: int, reading: Reading
    ) -> None:
        """
        Args:
            meta: the source's metadata.
            assembler: windows and sample layout (shared with the map-style dataset).
            cameras: the source's cameras.
            index: the source this reads (0 for a plain dataset; its pieces' readers carry it).
            reading: the dataset's reading: settings, counters, data-file caches and threads, shared by its sources
                so that they grow with the live pieces, not with the sources.
        """
        self.meta = meta
        self.index = index
        self.assembler = assembler
        self.reading = reading
        self.counters = reading.counters
        # Batches are assembled whole unless transforms must see each sample (then: samples + collate).
        self.batches = BatchAssembler(assembler) if assembler.image_transforms is None else None
        self.cameras = cameras
        settings = reading.settings
        self.camera_offsets = {k: assembler.delta_offsets.get(k, NO_WINDOW) for k in meta.video_keys}
        # A shuffled piece is read by residue class of its windows' stride (overlapping windows decode together).
        windows = [assembler.delta_offsets[k] for k in meta.video_keys if k in assembler.delta_offsets]
        self.stride = window_stride(windows) if settings.shuffle else 1
        # Each camera file holds one episode: a piece's decoders serve no other piece of a different episode
        # (one-episode sources; an episode cut into two pieces reopens them).
        self.own_files = bool(meta.video_keys) and meta.episodes.own_video_files()
        self.decode_ahead = settings.decode_ahead or default_decode_ahead(
            sample_frame_bytes(cameras.frame_sizes), own_files=self.own_files
        )
        # A piece's first run in the pass's first batch: up to the next keyframe (info.json's GOP, when the cameras
        # share one) rather than the whole look-ahead, so its later runs still start on keyframes. A one-episode
        # piece still decodes whole at once: its decoders close after that one call.
        gop = None if self.own_files else meta.info.cameras_gop
        self.first_run = min(self.decode_ahead, gop or self.decode_ahead)
        remote = settings.prefetch and not meta.data_storage.is_local
        self.rows = DataRowReader(
            meta,
            read_ahead_threads=ROW_THREADS if remote else 0,
            caches=reading.row_caches,
            threads=reading.row_threads,
        )
        self.video_ahead = VideoReadAhead(meta, enabled=settings.prefetch, reading=reading)

    def geometry(self, episode: int, first: int, stop: int) -> PieceGeometry:
        """The sample order and per-camera window frames of the piece [first, stop) of `episode`."""
        return piece_geometry(
            first=first,
            stop=stop,
            stride=self.stride,
            episode_length=int(self.meta.episodes.lengths_of([episode])[0]),
            camera_offsets=self.camera_offsets,
        )

    def open_piece(self, episode: int, geometry: PieceGeometry, worker: int) -> PieceReader:
        """A live piece of `episode` (its rows read now), for samples in its geometry's order."""
        return PieceReader(
            self._episode_rows(episode),
            geometry.sample_frames,
            geometry.camera_frames,
            partial(self._decode, worker),
            self.decode_ahead,
            source=self.index,
            # its camera files hold this episode alone: their decoders close once the piece decoded all it needs
            decoded_all=partial(self.cameras.close_files, episode) if self.own_files else None,
        )

    def _episode_rows(self, episode: int) -> EpisodeRows:
        """The rows of `episode`, timed as the rows stage: the loop's wait, and the read itself when it runs here."""
        stages = self.reading.stage_times.get()
        threads = self.rows.read_ahead_threads
        started = time.perf_counter_ns()
        if threads:
            # Asked for (when it was not already) so that every read runs in the row pool, timed there once.
            self.rows.read_ahead(episode)
        rows = self.rows.episode(episode)
        elapsed = time.perf_counter_ns() - started
        if threads:
            stages.wait("rows", elapsed, threads=threads)
        else:
            stages.work("rows", elapsed)
        return rows

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
        return self.batch_assembler.assemble(rows, frames, allocate)

    @property
    def batch_assembler(self) -> BatchAssembler:
        """Whole-batch assembly (none with image_transforms, which run per sample)."""
        if self.batches is None:
            raise ValueError("this dataset has image_transforms, which run per sample: batch it with a collate")
        return self.batches

    def prefill(self, refs: Sequence[tuple[PieceReader, int]], worker: int, *, pass_start: bool = False) -> None:
        """Decode what the batch's pieces miss, with their look-ahead, in few decoder calls per camera file
        (pieces of one file share a call up to FRAMES_PER_CALL frames, instead of a call per piece and camera): a
        piece's samples in the batch decide its frames, together. pass_start: the pass's first batch, whose pieces
        are all new: each decodes its samples in this batch up to the next keyframe (`first_run`), not a look-ahead
        of decode_ahead for every live piece before the first batch (16 samples of ~48 pieces per worker); a seek
        more per piece, once per pass. A first run of one sample would start every later run of the piece one frame
        past a keyframe at GOP 2: +5-6% decoding for the whole pass (BENCHMARKS.md, eleventh session)."""
        by_reader: dict[int, tuple[PieceReader, list[int]]] = {}  # id -> the piece and its positions in the batch
        for reader, position in refs:
            by_reader.setdefault(id(reader), (reader, []))[1].append(position)
        requests = []
        for reader, mine in by_reader.values():
            wanted = reader.missing(mine, ahead=self.first_run if pass_start else None)
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
        self.reading.count_reads(worker)

    def count_frames(self, worker: int, frames: Sequence[Mapping[str, Sequence[torch.Tensor]]]) -> None:
        """Count the frames delivered to samples."""
        if self.meta.video_keys:
            self.counters.add(worker, "frames_delivered", sum(len(w) for f in frames for w in f.values()))

    def _decode(
        self, worker: int, rows: EpisodeRows, frames_by_key: Mapping[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        self.counters.add(worker, "frames_decoded", sum(len(f) for f in frames_by_key.values()))
        return self.cameras.decode_many(
            rows.episode, {k: self.assembler.timestamps(rows, f) for k, f in frames_by_key.items()}
        )


def sample_frame_bytes(frame_sizes: Mapping[str, tuple[int, int] | None]) -> int:
    """Bytes of one decoded RGB frame of each camera: what a sample's cameras hold at one instant."""
    return sum(3 * height * width for height, width in (size for size in frame_sizes.values() if size is not None))
