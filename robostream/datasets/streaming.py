"""StreamingLeRobotDataset: an IterableDataset that reads each episode forward, shuffles without a decoded-sample
buffer, splits the epoch over ranks and DataLoader workers, and resumes exactly from a small JSON state.

How an epoch is produced (all of it a pure function of metadata, seed, epoch and the canonical stream count):
1. Episodes are permuted by (seed, epoch) and divided into C canonical streams (plan/partition.py).
2. Each stream interleaves a pool of up to `pool_size` live pieces, each spread evenly (with random jitter) over
   the whole stream so that all end together (plan/schedule.py); each piece is read forward, its frames decoded
   in small batches and kept only while a later sample needs them (piece_reader.py).
3. Consumer k of K = world_size x num_workers owns streams k, k+K, ... and emits them round-robin; worker w of
   every rank emits the same number of samples (pad by repeating, or drop, see `uneven`), so ranks get equal
   batch counts; a single rank emits every sample once.
4. A resume state holds the offset reached in every canonical stream. Any layout whose consumer count divides C
   continues from it: exactly the same samples next when the layout is unchanged, and no sample repeated or
   skipped when it changed.

Memory and randomness knobs:
- pool_size (per canonical stream, default 8): live pieces per stream. A consumer holds pool_size x C/K pieces;
  each costs its decoded working set, about (window span / window stride + 1 + decode_ahead) frames per camera
  (single mode, 256x256x3 uint8, 3 cameras: ~5 frames x 3 x 192 KiB = 2.9 MiB). A batch mixes samples of up to
  min(batch_size, pool_size x C/K) episodes (`robostream bench` reports shuffle_randomness_frac, distinct episodes
  per batch / batch size, next to a uniform sampler's).
- canonical_streams: more streams spread an epoch over more consumers but cut more episodes in two.
- decode_ahead (default 4): samples of a piece whose missing frames are decoded in one call.
- prefetch_pieces (default 2, remote data only): the next pieces of each stream whose video bytes are fetched in
  background threads, within the storage's block budget (Storage.block_budget, 128 MiB per process).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from robostream.datasets.cameras import CameraReader
from robostream.datasets.counters import FrameCounters
from robostream.datasets.frames import load_frame_table
from robostream.datasets.piece_reader import PieceReader
from robostream.datasets.prefetch import Prefetcher
from robostream.datasets.sample import SampleAssembler
from robostream.datasets.source import open_dataset, resolve_episodes
from robostream.plan.layout import (
    Consumer,
    auto_canonical_streams,
    owned_streams,
    resolve_rank_world,
)
from robostream.plan.order import PURPOSE_POOL, epoch_episode_order, rng_for
from robostream.plan.partition import (
    Piece,
    group_episodes_by_files,
    partition_episodes,
    split_contiguous,
)
from robostream.plan.resume import consumer_quotas, stream_offsets_after
from robostream.plan.schedule import (
    piece_sample_order,
    pool_schedule,
    take,
    window_stride,
)
from robostream.plan.windows import delta_offsets
from robostream.storage.retry import RetryPolicy
from robostream.storage.source import DEFAULT_BLOCK_BUDGET

STATE_VERSION = 1
PARTITIONS = ("contiguous", "files")


@dataclass(frozen=True)
class EpochPlan:
    pieces: list[list[Piece]]  # per canonical stream
    natural: list[int]  # samples each stream holds
    start: list[int]  # per stream: samples already consumed
    quotas: list[int]  # per consumer role: samples it still yields
    repeats_done: list[int]  # per consumer role: padding samples already yielded
    rotation: int  # worker role shift after a same-layout resume


class StreamingLeRobotDataset(IterableDataset):
    """Iterable, resumable, rank- and worker-aware reader of a LeRobot v3.0 dataset (same samples as map-style)."""

    def __init__(self, repo_id: str | None = None, root: str | Path | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 shuffle: bool = True, seed: int = 0,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None, return_uint8: bool = False,
                 video_backend: str | None = None, video_decode_device: str = "cpu", pool_size: int = 8,
                 canonical_streams: int | None = None, uneven: str = "pad", partition: str = "contiguous",
                 decode_ahead: int = 4, prefetch_pieces: int = 2, video_decoder_cache_size: int | None = None,
                 revision: str | None = None, storage_options: dict[str, Any] | None = None,
                 data_files_root: str | Path | None = None, retry: RetryPolicy | None = None,
                 cache_dir: str | Path | None = None, cache_limit: int | str | None = None,
                 read_buffer: int | str = DEFAULT_BLOCK_BUDGET,
                 rank: int | None = None, world_size: int | None = None) -> None:
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={uneven!r}: expected 'pad' (repeat samples) or 'drop' (skip the tail)")
        if partition not in PARTITIONS:
            raise ValueError(f"partition={partition!r}: expected one of {PARTITIONS}")
        if pool_size < 1 or decode_ahead < 1:
            raise ValueError(f"pool_size ({pool_size}) and decode_ahead ({decode_ahead}) must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank= and world_size=, or neither (then they are resolved automatically)")
        self.meta = open_dataset(repo_id, root, video_backend, "StreamingLeRobotDataset", revision,
                                 storage_options, data_files_root, retry, cache_dir, cache_limit,
                                 read_buffer)
        self.root = self.meta.root
        self.episodes = resolve_episodes(self.meta, episodes)
        self.shuffle, self.seed = shuffle, seed
        self.pool_size, self.uneven, self.partition, self.decode_ahead = pool_size, uneven, partition, decode_ahead
        self.canonical_streams = canonical_streams
        self._rank_world = (rank, world_size) if rank is not None else None
        offsets = delta_offsets(delta_timestamps, self.meta.fps, tolerance_s,
                                list(self.meta.info.features)) if delta_timestamps else {}
        self.delta_timestamps = dict(delta_timestamps or {})
        self.frames = load_frame_table(self.meta, self.episodes)
        self.assembler = SampleAssembler(self.meta, self.frames, offsets, return_uint8, image_transforms)
        self.cameras = CameraReader(self.meta, tolerance_s, video_backend, video_decode_device,
                                    video_decoder_cache_size)
        self.prefetch_pieces = prefetch_pieces
        self.prefetcher = Prefetcher(self.meta, threads=2 if prefetch_pieces > 0 else 0)
        self.stride = window_stride([offsets[k] for k in self.meta.video_keys if k in offsets]) if shuffle else 1
        self.lengths = np.array([self.assembler.episode_rows(e)[1] for e in self.episodes], dtype=np.int64)
        self.epoch = 0
        self._resume: dict[str, Any] | None = None  # where the next __iter__ continues from
        self._emitted = 0  # samples this process emitted in its current pass (in-process iteration)
        self._worker = 0
        self._live_frames = 0  # decoded frames held by this process's live pieces
        self.counters = FrameCounters()

    # -- layout and plan ---------------------------------------------------------------------------------------
    def consumer(self, num_workers: int | None = None, worker: int | None = None) -> Consumer:
        """This process's consumer: rank/world from the constructor, torch.distributed or env; worker from torch."""
        rank, world = self._rank_world or resolve_rank_world()
        if num_workers is None:
            info = get_worker_info()
            worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return Consumer(rank, world, worker or 0, num_workers)

    def resolved_canonical_streams(self, consumers: int) -> int:
        """The canonical stream count: fixed by the constructor or a loaded state, else derived from the layout."""
        return self.canonical_streams or auto_canonical_streams(consumers)

    def stream_pieces(self, canonical: int) -> list[list[Piece]]:
        """Pieces (episode position, first frame, stop frame) of every canonical stream in this epoch."""
        order = epoch_episode_order(len(self.episodes), self.seed, self.epoch, self.shuffle)
        if self.partition == "contiguous":
            return split_contiguous(order, self.lengths, canonical)
        files = [[self.meta.data_file(e)] + [self.meta.video_file(e, k) for k in self.meta.video_keys]
                 for e in self.episodes]
        groups = group_episodes_by_files(files)
        if len(groups) < canonical:
            raise ValueError(
                f"partition='files': episodes sharing files form {len(groups)} groups, fewer than the "
                f"{canonical} canonical streams (files of different cameras roll over at different episodes); "
                f"use partition='contiguous' or fewer canonical streams")
        order_rank = {int(p): i for i, p in enumerate(order)}  # a stream visits its groups in epoch order
        bins = partition_episodes([int(self.lengths[g].sum()) for g in groups], canonical)
        return [[(p, 0, int(self.lengths[p])) for gi in sorted(b, key=lambda gi: order_rank[groups[gi][0]])
                 for p in groups[gi]] for b in bins]

    def epoch_plan(self, world_size: int, num_workers: int) -> EpochPlan:
        """Streams, their progress and every consumer role's quota for the coming iteration."""
        consumers = world_size * num_workers
        canonical = self.resolved_canonical_streams(consumers)
        owned_streams(0, consumers, canonical)  # validates the layout against the canonical count
        pieces = self.stream_pieces(canonical)
        natural = [sum(stop - first for _, first, stop in stream) for stream in pieces]
        resume = self._resume or {}
        start = resume.get("stream_offsets") or [0] * canonical
        if len(start) != canonical:
            raise ValueError(f"resume state has {len(start)} stream offsets for {canonical} canonical streams")
        if resume.get("layout") == [world_size, num_workers]:
            # Same layout: every consumer continues exactly where it was, rotated to whose batch comes next.
            return EpochPlan(pieces, natural, start, list(resume["quota_left"]), list(resume["repeats_done"]),
                             int(resume["worker_rotation"]))
        # Fresh epoch or new layout: quotas that give every rank the same batches (pad repeats, drop cuts).
        quotas = consumer_quotas([n - o for n, o in zip(natural, start)], world_size, num_workers, self.uneven)
        return EpochPlan(pieces, natural, start, quotas, [0] * consumers, 0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration produces (clears a resume state of another epoch)."""
        if epoch != self.epoch:
            self._resume = None
        self.epoch = epoch

    # -- resume ----------------------------------------------------------------------------------------------
    def state_dict(self, emitted_by_role: Sequence[int] | None = None, num_workers: int = 1,
                   batches: int = 0) -> dict[str, Any]:
        """A small JSON-serialisable state: each canonical stream's offset plus what the layout still owes.

        Without arguments it describes in-process iteration (no DataLoader workers); StreamingDataLoader passes
        what every consumer role delivered, derived from the `batches` the training loop consumed.
        """
        _, world = self._rank_world or resolve_rank_world()
        plan = self.epoch_plan(world, num_workers)
        consumers = world * num_workers
        # Ranks consume in lockstep, so in-process iteration on this rank stands for every consumer.
        emitted = list(emitted_by_role) if emitted_by_role is not None else [self._emitted] * consumers
        offsets = stream_offsets_after(plan.start, plan.natural, consumers, emitted, interleaved=self.shuffle)
        repeats = []
        for role in range(consumers):
            left = sum(plan.natural[s] - plan.start[s] for s in owned_streams(role, consumers, len(plan.start)))
            repeats.append(plan.repeats_done[role] + max(0, emitted[role] - left))
        return {"version": STATE_VERSION, "epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                "num_episodes": len(self.episodes), "canonical_streams": len(plan.start),
                "stream_offsets": [int(o) for o in offsets], "layout": [world, num_workers],
                "quota_left": [int(q - e) for q, e in zip(plan.quotas, emitted)],
                "repeats_done": [int(r) for r in repeats],
                "worker_rotation": int((plan.rotation + batches) % num_workers)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` at the next iteration (on any layout whose consumer count divides C)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"resume state version {state.get('version')!r}; this robostream writes {STATE_VERSION}")
        for key in ("seed", "shuffle", "num_episodes"):
            mine = len(self.episodes) if key == "num_episodes" else getattr(self, key)
            if state[key] != mine:
                raise ValueError(f"resume state has {key}={state[key]!r} but this dataset has {key}={mine!r}; "
                                 "a stream can only resume over the same episodes, seed and shuffle setting")
        if len(state["stream_offsets"]) != state["canonical_streams"]:
            raise ValueError("resume state: stream_offsets must have one entry per canonical stream")
        self.epoch = int(state["epoch"])
        self.canonical_streams = int(state["canonical_streams"])
        self._resume = {k: state[k] for k in ("stream_offsets", "layout", "quota_left", "repeats_done",
                                              "worker_rotation")}

    # -- iteration -------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumer = self.consumer()
        plan = self.epoch_plan(consumer.world_size, consumer.num_workers)
        # After a same-layout resume, worker j plays the role of the worker whose batch comes next.
        role = consumer.rank * consumer.num_workers + (consumer.worker + plan.rotation) % consumer.num_workers
        streams = owned_streams(role, consumer.count, len(plan.pieces))
        # A consumer owed more than its streams hold (uneven="pad") repeats its epoch's samples from the start.
        repeats = itertools.islice(self._repeat_picks(plan, streams), plan.repeats_done[role], None)
        picks = itertools.chain(self._consumer_picks(plan, streams, plan.start), repeats)
        self._emitted = 0
        self._worker = consumer.worker
        self._live_frames = 0
        readers: dict[tuple[int, int], PieceReader] = {}
        for pick in itertools.islice(picks, plan.quotas[role]):
            sample = self._sample(plan.pieces, pick, readers)
            self._emitted += 1  # counted before the yield: a consumer may never ask for the next one
            yield sample

    def _repeat_picks(self, plan: EpochPlan, streams: list[int]) -> Iterator[tuple[int, int, int]]:
        while True:
            yield from self._consumer_picks(plan, streams, [0] * len(plan.pieces))

    def _consumer_picks(self, plan: EpochPlan, streams: list[int], start: Sequence[int]
                        ) -> Iterator[tuple[int, int, int]]:
        """(stream, piece, position) picks of one consumer: always from its unfinished stream with the lowest
        offset (a round-robin from equal offsets; see plan.resume.level_fill_counts), or one stream after the
        other when not shuffling."""
        if not self.shuffle:
            for s in streams:
                yield from self._stream_picks(plan, s, start[s])
            return
        heap = [(start[s], s, self._stream_picks(plan, s, start[s])) for s in streams if start[s] < plan.natural[s]]
        heapq.heapify(heap)
        while heap:
            offset, s, picks = heap[0]
            yield next(picks)
            if offset + 1 < plan.natural[s]:
                heapq.heapreplace(heap, (offset + 1, s, picks))
            else:
                heapq.heappop(heap)

    def _stream_picks(self, plan: EpochPlan, stream: int, skip: int) -> Iterator[tuple[int, int, int]]:
        """Picks of one stream from `skip` on: its pool schedule (vectorised skipping)."""
        rng = rng_for(self.seed, self.epoch, PURPOSE_POOL, stream) if self.shuffle else None
        lengths = [stop - first for _, first, stop in plan.pieces[stream]]
        for piece_ids, positions in take(pool_schedule(lengths, self.pool_size, rng), skip, None):
            for piece, position in zip(piece_ids.tolist(), positions.tolist()):
                yield stream, piece, position

    def _sample(self, pieces: list[list[Piece]], pick: tuple[int, int, int],
                readers: dict[tuple[int, int], PieceReader]) -> dict[str, Any]:
        stream, piece, position = pick
        key = (stream, piece)
        reader = readers.get(key)
        if reader is None:
            reader = readers[key] = self._piece_reader(*pieces[stream][piece])
            for episode_position, first, stop in pieces[stream][piece + 1: piece + 1 + self.prefetch_pieces]:
                self.prefetcher.piece(self.episodes[episode_position], first, stop)  # next pieces to go live
        row = int(reader.sample_rows[position])
        video = {}
        if self.meta.video_keys:
            held = reader.resident
            video = reader.frames_for(position)
            self._live_frames += reader.resident - held  # a running total: only this reader's count changed
            self.counters.peak(self._worker, "peak_piece_frames", reader.resident)
            self.counters.peak(self._worker, "peak_live_frames", self._live_frames)
            self.counters.peak(self._worker, "peak_live_pieces", len(readers))
            self.counters.add(self._worker, "frames_delivered", sum(len(v) for v in video.values()))
        storage = self.meta.data_storage
        if not storage.is_local:
            self.counters.set(self._worker, "bytes_read", storage.counter.bytes)
            self.counters.set(self._worker, "read_wait_us", int(storage.blocks.wait_s * 1e6))
            self.counters.set(self._worker, "block_bytes_peak", storage.blocks.peak_bytes)
        if position == len(reader.sample_rows) - 1:
            self._live_frames -= reader.resident  # none are left after the last sample; kept exact regardless
            del readers[key]
        return self.assembler.assemble(row, video)

    def _piece_reader(self, episode_position: int, first: int, stop: int) -> PieceReader:
        episode = self.episodes[episode_position]
        frames = piece_sample_order(first, stop, self.stride)
        first_row, _ = self.assembler.episode_rows(episode)
        return PieceReader(episode, first_row + frames, self.assembler.camera_window_rows(episode, frames),
                           self._decode, self.decode_ahead)

    def _decode(self, episode: int, rows_by_key: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        self.counters.add(self._worker, "frames_decoded", sum(len(r) for r in rows_by_key.values()))
        return self.cameras.decode_many(episode, {k: self.assembler.timestamps(r) for k, r in rows_by_key.items()})

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded and delivered over this process and its DataLoader workers, the peak decoded-frame
        working set (of one live piece, of all live pieces of a worker, the most pieces live at once), and for
        remote data the bytes read, the time readers waited for them (us) and the peak bytes of fetched blocks
        held by a worker."""
        return self.counters.totals()

