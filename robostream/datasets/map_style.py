"""Map-style LeRobotDataset, returning exactly the samples `lerobot` returns.

Sample contract (lerobot 0.4+, v3.0): every parquet column as a tensor (scalars 0-d), each camera as float32 CHW in
[0, 1] (uint8 with `return_uint8=True`), `task` as a string; with `delta_timestamps` each listed key is stacked to
(T, ...) over clamp(i + offset, from, to - 1) with `<key>_is_pad`. Like lerobot, a camera window of length 1 is
squeezed to (C, H, W).

Start-up and memory do not grow with the dataset: construction reads the metadata only (info, the locating columns
of the episode table, tasks); a sample's rows are read by offset from column files derived from its data file once
per node, on the first read of that file (format/data_columns.py).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import get_worker_info

from robostream.datasets.cameras import CameraReader
from robostream.datasets.origin import open_dataset, resolve_episodes
from robostream.datasets.reading import Reading, ReadingSettings
from robostream.datasets.sample import SampleAssembler
from robostream.datasets.video_read_ahead import VideoReadAhead
from robostream.format.data_columns import DataColumns
from robostream.format.depth import DEFAULT_DEPTH_UNIT, DepthUnit
from robostream.plan.windows import delta_offsets
from robostream.process_local import ProcessLocal
from robostream.storage.options import ReadOptions
from robostream.storage.read_ahead import Need
from robostream.video.options import DecodeOptions


class LeRobotDataset(torch.utils.data.Dataset):
    """Random access to the frames of a LeRobot v3.0 dataset, with lerobot's sample contract."""

    def __init__(
        self,
        repo_id: str | None = None,
        *,
        root: str | Path | None = None,
        revision: str | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = 1e-4,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        return_uint8: bool = False,
        video_backend: Literal["torchcodec", "pyav"] | None = None,
        decoding: DecodeOptions | None = None,
        depth_output_unit: DepthUnit = DEFAULT_DEPTH_UNIT,
        read_options: ReadOptions | None = None,
    ) -> None:
        """
        Args:
            repo_id: a Hub dataset ("owner/name"): lerobot's local copy when there is one, else read from the Hub.
            root: a local folder or URL (hf://, s3://, http(s)://, file://) of the dataset; wins over repo_id.
            revision: the Hub revision (branch, tag or commit) of repo_id, pinned to its commit at construction.
            episodes: episode indices to read (default all); index i is the i-th frame of the selection.
            delta_timestamps: per key, offsets in seconds (multiples of 1/fps) of a window around each frame.
            tolerance_s: how far a decoded frame's timestamp may be from the asked one before it is an error.
            image_transforms: applied to every camera tensor (float CHW, or uint8 with return_uint8).
            return_uint8: keep cameras uint8 (4x less memory and transport than float32).
            video_backend: "torchcodec" (default) or "pyav" (fallback decoder).
            decoding: where videos are decoded and how many decoders stay open (default DecodeOptions(): on CPU,
                2 decoders per camera, at least 4).
            depth_output_unit: depth cameras (lerobot's `is_depth_map` video features) come as float32 (1, H, W)
                depths in "mm" (lerobot's default) or "m", and `meta.stats` of them in the same unit.
            read_options: how bytes are read (remote options, disk cache, read buffer); see ReadOptions.
        """
        self.repo_id = repo_id
        self.delta_timestamps = dict(delta_timestamps or {})
        decoding = decoding or DecodeOptions()
        settings = ReadingSettings(
            read_options=read_options,
            delta_timestamps=self.delta_timestamps,
            tolerance_s=tolerance_s,
            return_uint8=return_uint8,
            image_transforms=image_transforms,
            depth_output_unit=depth_output_unit,
            video_backend=video_backend,
            decode_device=decoding.device,
            decode_gpu_fallback=decoding.gpu_fallback,
        )
        self.meta = open_dataset(
            repo_id, root, revision, read_options, video_backend, "LeRobotDataset", depth_output_unit=depth_output_unit
        )
        self.root = self.meta.root
        self.episodes = resolve_episodes(self.meta, episodes)
        self.tolerance_s = tolerance_s
        self.image_transforms = image_transforms
        self.return_uint8 = return_uint8
        self.delta_offsets = (
            delta_offsets(self.delta_timestamps, self.meta.fps, tolerance_s, list(self.meta.info.features))
            if delta_timestamps
            else {}
        )
        self.lengths = self.meta.episodes.lengths_of(self.episodes)
        self._ends = np.cumsum(self.lengths)
        self.rows = DataColumns(self.meta, self.meta.derived)
        # Random access: every camera's current file stays open, plus room for the next file of each.
        self.reading = Reading(settings, decoders_kept=decoding.decoders_kept or max(4, 2 * len(self.meta.video_keys)))
        self.video_ahead = VideoReadAhead(self.meta, enabled=True, reading=self.reading)
        # Random frames of a remote file: each decoded from its own packets, fetched exactly (a few KB, not 64 KiB
        # reads: video/packet_frames.py).
        self.cameras = CameraReader(self.meta, self.reading, packets=self.video_ahead.enabled)
        self.assembler = SampleAssembler(self.meta, self.delta_offsets, return_uint8, image_transforms)
        self.reading.add_storage(self.meta.data_storage)
        self._ahead = ProcessLocal(_AskedAhead)

    # -- lerobot-compatible accessors --------------------------------------------------------------------------
    @property
    def fps(self) -> int | float:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.meta.info.features

    @property
    def camera_keys(self) -> list[str]:
        return self.meta.camera_keys

    @property
    def num_frames(self) -> int:
        return len(self)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def __len__(self) -> int:
        return int(self._ends[-1])

    def video_decoder_cache_stats(self) -> dict[str, float | int]:
        """This process's decoder-cache statistics (each DataLoader worker has its own)."""
        return self.cameras.cache.stats()

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded and delivered over this process and its DataLoader workers (of cameras asked on a GPU:
        decoded there, `frames_decoded_gpu`, or on the CPU where it cannot, `frames_decoded_cpu_fallback`), each
        stage's tasks, busy time and wait, and for remote data the bytes read and the time readers waited."""
        return self.reading.counters.totals()

    def camera_decoders(self) -> dict[str, str]:
        """Where each camera is decoded: "cpu", "cuda:N", or "cpu (GPU fallback: why)" (opens each camera's first
        file in this process)."""
        return self.cameras.camera_decoders()

    def locate(self, position: int) -> tuple[int, int]:
        """(episode index, frame within the episode) of the frame at `position`."""
        n = len(self)
        # A float, bool or string would be truncated or compared to an index silently: only integers index frames
        # (ints, numpy integers, 0-d integer tensors through __index__).
        if isinstance(position, (bool, np.bool_)) or not hasattr(position, "__index__"):
            raise TypeError(
                f"index {position!r} ({type(position).__name__}): expected an integer position in [-{n}, {n})"
            )
        position = operator.index(position)
        if not -n <= position < n:
            raise IndexError(f"index {position} out of range for a dataset of {n} frames")
        position = int(position) % n
        selected = int(np.searchsorted(self._ends, position, side="right"))
        return self.episodes[selected], position - int(self._ends[selected] - self.lengths[selected])

    # -- samples ---------------------------------------------------------------------------------------------
    def __getitem__(self, position: int) -> dict[str, Any]:
        started = time.perf_counter_ns()
        episode, frame = self.locate(position)
        rows = self.rows.episode(episode)
        windows = self.assembler.windows(frame, len(rows))
        wanted = {
            k: self.assembler.timestamps(rows, frames)
            for k, frames in self.assembler.video_frames(frame, windows[0]).items()
        }
        self._fetch_video([(episode, wanted)], need="now")  # remote: every camera's bytes at once
        video = self.cameras.decode_many(episode, wanted) if wanted else {}
        assembling = time.perf_counter_ns()
        sample = self.assembler.assemble(rows, frame, video, windows)
        self._produced(started, assembling, frames=sum(len(times) for times in wanted.values()))
        return sample

    def __getitems__(self, positions: Sequence[int]) -> list[dict[str, Any]]:
        """The samples at `positions` (what torch's DataLoader asks for per batch), equal to `self[p]` for each;
        their frames are decoded together, one decoder call per camera file instead of one per sample and camera.

        From a remote store, the byte spans of all their frames are located first and fetched at once, merged, many
        requests in flight (one round trip for the batch instead of one per block a decoder reads); a batch from
        `LookAheadBatchSampler` also names the worker's next batch, whose bytes are then fetched while this one
        decodes."""
        started = time.perf_counter_ns()
        prepared, requests = self._requests(positions)
        if self.video_ahead.enabled:
            asked = self._ahead.get()
            # The worker's next batches (LookAheadBatch), nearest first, each asked for once.
            upcoming = [
                (tuple(batch), self._requests(batch)[1])
                for batch in getattr(positions, "ahead", ())
                if tuple(batch) not in asked.pending
            ]
            self.video_ahead.prepare(
                [
                    (episode, key)
                    for _, batch in [(None, requests), *upcoming]
                    for episode, wanted in batch
                    for key in wanted
                ]
            )
            self._fetch_video(requests, need="now")
            for key, batch in upcoming:
                asked.ask(key, self._fetch_video(batch, need="soon"))
        decoded = (
            self.cameras.decode_episodes(requests, pooled=False) if self.meta.video_keys else [{} for _ in requests]
        )
        if self.video_ahead.enabled:
            self._ahead.get().served(tuple(positions))
        assembling = time.perf_counter_ns()
        samples = [
            self.assembler.assemble(rows, frame, video, windows)
            for (rows, frame, windows), video in zip(prepared, decoded)
        ]
        frames = sum(len(times) for _, wanted in requests for times in wanted.values())
        self._produced(started, assembling, frames=frames)
        return samples

    def _fetch_video(self, requests: Sequence[tuple[int, dict[str, Any]]], *, need: Need) -> list[tuple[Any, int, int]]:
        """Fetch the video bytes of these (episode, times by camera) requests' frames: exactly their packets for the
        cameras decoded from packets (one lookup and one fetch per camera file for them all), else per request the
        spans their decoders read (those returned, for release)."""
        if not self.video_ahead.enabled:  # local data, or remote through the disk cache: nothing to fetch here
            return []
        packets = self.cameras.packets
        fed = self.video_ahead.fetch_packets(
            [(episode, {k: t for k, t in wanted.items() if k in packets}) for episode, wanted in requests], need=need
        )
        plain = [
            span
            for episode, wanted in requests
            for span in self.video_ahead.fetch(
                episode, {k: t for k, t in wanted.items() if k not in packets}, need=need
            )
        ]
        return fed + plain

    def _produced(self, started: int, assembling: int, *, frames: int) -> None:
        """A sample or a batch is out (asked for at `started`, assembled since `assembling`, `frames` camera frames
        decoded for it, each delivered: map-style decodes what is asked): its assembly counts in the assemble stage
        (datasets/stages.py), its whole time in the loop's wall time, and what the stages and the storage did
        reaches this worker's row of the counters (`reading.counters`)."""
        now = time.perf_counter_ns()
        stages = self.reading.stage_times.get()
        stages.work("assemble", now - assembling)
        stages.wall(now - started)
        info = get_worker_info()
        worker = info.id if info is not None else 0
        self.reading.counters.add(worker, "frames_decoded", frames)
        self.reading.counters.add(worker, "frames_delivered", frames)
        self.reading.count_stages(worker)
        self.reading.count_reads(worker)

    def _requests(self, positions: Sequence[int]) -> tuple[list[tuple[Any, int, Any]], list[tuple[int, dict]]]:
        """Per position its (rows, frame, windows) and its (episode, timestamps by camera) decode request."""
        prepared, requests = [], []
        for position in positions:
            episode, frame = self.locate(position)
            rows = self.rows.episode(episode)
            windows = self.assembler.windows(frame, len(rows))
            prepared.append((rows, frame, windows))
            requests.append(
                (
                    episode,
                    {
                        k: self.assembler.timestamps(rows, frames)
                        for k, frames in self.assembler.video_frames(frame, windows[0]).items()
                    },
                )
            )
        return prepared, requests


class _AskedAhead:
    """The byte spans fetched ahead for the batches a worker will serve next (one process's), released once
    the batch is served (or when more than a few are pending: a batch that never came, e.g. at an epoch's end),
    so bytes no decoder read stop counting as ahead."""

    PENDING = 8

    def __init__(self) -> None:
        self.pending: dict[tuple[int, ...], list[tuple[Any, int, int]]] = {}

    def ask(self, batch: tuple[int, ...], spans: list[tuple[Any, int, int]]) -> None:
        self.pending[batch] = spans
        while len(self.pending) > self.PENDING:
            self._release(self.pending.pop(next(iter(self.pending))))

    def served(self, batch: tuple[int, ...]) -> None:
        self._release(self.pending.pop(batch, []))

    @staticmethod
    def _release(spans: list[tuple[Any, int, int]]) -> None:
        for reader, start, end in spans:
            reader.release(start, end)
