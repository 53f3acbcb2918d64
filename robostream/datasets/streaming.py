"""StreamingLeRobotDataset: an IterableDataset that reads each episode forward, shuffles without a decoded-sample
buffer, splits the epoch over ranks and DataLoader workers, and resumes exactly from a small JSON state.

How an epoch is produced (all of it a pure function of metadata, seed, epoch and the canonical stream count):
1. Episodes are permuted by (seed, epoch) and divided into C canonical streams (plan/partition.py).
2. Each stream interleaves a pool of `pool_size` live pieces at random (plan/schedule.py); each piece is read
   forward, its frames decoded in small batches and kept only while a later sample needs them (piece_reader.py).
3. Consumer k of K = world_size x num_workers owns streams k, k+K, ... and emits them round-robin; every consumer
   emits the same number of samples (pad by repeating, or drop, see `uneven`), so ranks get equal batch counts.
4. A resume state holds the offset reached in every canonical stream. Any layout whose consumer count divides C
   continues from it: exactly the same samples next when the layout is unchanged, and no sample repeated or
   skipped when it changed.

Memory and randomness knobs:
- pool_size (per canonical stream, default 8): live pieces per stream. A consumer holds pool_size x C/K pieces;
  each costs its decoded working set, about (window span / window stride + 1 + decode_ahead) frames per camera
  (single mode, 256x256x3 uint8, 3 cameras: ~5 frames x 3 x 192 KiB = 2.9 MiB). A batch mixes samples of up to
  min(batch_size, pool_size x C/K) episodes; report `batch_diversity` to compare with a uniform sampler.
- canonical_streams: more streams spread an epoch over more consumers but cut more episodes in two.
- decode_ahead (default 4): samples of a piece whose missing frames are decoded in one call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from robostream.datasets.cameras import CameraReader
from robostream.datasets.frames import load_frame_table
from robostream.datasets.map_style import default_root, resolve_episodes
from robostream.datasets.piece_reader import PieceReader
from robostream.datasets.sample import SampleAssembler
from robostream.format.metadata import load_metadata
from robostream.plan.layout import Consumer, auto_canonical_streams, owned_streams, resolve_rank_world
from robostream.plan.order import PURPOSE_POOL, epoch_episode_order, rng_for
from robostream.plan.partition import Piece, group_episodes_by_files, partition_episodes, split_contiguous
from robostream.plan.resume import consumer_quota, stream_offsets_after
from robostream.plan.schedule import piece_sample_order, pool_schedule, take, window_stride
from robostream.plan.windows import delta_offsets
from robostream.video.decoder import BACKENDS

STATE_VERSION = 1
PARTITIONS = ("contiguous", "files")


class StreamingLeRobotDataset(IterableDataset):
    """Iterable, resumable, rank- and worker-aware reader of a LeRobot v3.0 dataset (same samples as map-style)."""

    def __init__(self, repo_id: str | None = None, root: str | Path | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 shuffle: bool = True, seed: int = 0,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None, return_uint8: bool = False,
                 video_backend: str | None = None, video_decode_device: str = "cpu", pool_size: int = 8,
                 canonical_streams: int | None = None, uneven: str = "pad", partition: str = "contiguous",
                 decode_ahead: int = 4, video_decoder_cache_size: int | None = None,
                 rank: int | None = None, world_size: int | None = None) -> None:
        if root is None:
            if repo_id is None:
                raise ValueError("StreamingLeRobotDataset needs root= (a local dataset folder) or repo_id=")
            root = default_root(repo_id)
        if video_backend not in (None, *BACKENDS):
            raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={uneven!r}: expected 'pad' (repeat samples) or 'drop' (skip the tail)")
        if partition not in PARTITIONS:
            raise ValueError(f"partition={partition!r}: expected one of {PARTITIONS}")
        if pool_size < 1 or decode_ahead < 1:
            raise ValueError(f"pool_size ({pool_size}) and decode_ahead ({decode_ahead}) must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank= and world_size=, or neither (then they are resolved automatically)")
        self.meta = load_metadata(root)
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
        self.stride = window_stride([offsets[k] for k in self.meta.video_keys if k in offsets]) if shuffle else 1
        self.lengths = np.array([self.assembler.episode_rows(e)[1] for e in self.episodes], dtype=np.int64)
        self.epoch = 0
        self._start_offsets: list[int] | None = None  # offsets to resume from at the next __iter__
        self._emitted = 0  # samples this process emitted in its current pass (in-process iteration)
        self.frames_decoded = 0
        self.frames_delivered = 0

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
        rank_of = {g: i for i, g in enumerate(order)}  # groups are visited in the epoch's episode order
        bins = partition_episodes([int(self.lengths[g].sum()) for g in groups], canonical)
        return [[(p, 0, int(self.lengths[p])) for gi in sorted(b, key=lambda gi: rank_of[groups[gi][0]])
                 for p in groups[gi]] for b in bins]

    def epoch_plan(self, consumers: int) -> tuple[list[list[Piece]], list[int], list[int], int]:
        """(pieces per stream, stream lengths, start offsets, per-consumer quota) of the coming iteration."""
        canonical = self.resolved_canonical_streams(consumers)
        owned_streams(0, consumers, canonical)  # validates the layout against the canonical count
        pieces = self.stream_pieces(canonical)
        lengths = [sum(stop - first for _, first, stop in stream) for stream in pieces]
        start = self._start_offsets or [0] * canonical
        if len(start) != canonical:
            raise ValueError(f"resume state has {len(start)} stream offsets for {canonical} canonical streams")
        quota = consumer_quota([n - o for n, o in zip(lengths, start)], consumers, self.uneven)
        return pieces, lengths, list(start), quota

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration produces (clears a resume state of another epoch)."""
        if epoch != self.epoch:
            self._start_offsets = None
        self.epoch = epoch

    # -- resume ----------------------------------------------------------------------------------------------
    def state_dict(self, emitted_per_consumer: Sequence[int] | None = None, num_workers: int = 1) -> dict[str, Any]:
        """A small JSON-serialisable state: epoch, seed, canonical stream count and each stream's offset.

        Without arguments it describes in-process iteration (no DataLoader workers). StreamingDataLoader passes
        what every consumer delivered, computed from the batches the training loop consumed.
        """
        consumer = self.consumer(num_workers=num_workers, worker=0)
        _, lengths, start, _ = self.epoch_plan(consumer.count)
        # Ranks consume in lockstep, so in-process iteration on this rank stands for every consumer.
        emitted = list(emitted_per_consumer) if emitted_per_consumer is not None else [self._emitted] * consumer.count
        offsets = stream_offsets_after(start, lengths, consumer.count, emitted, interleaved=self.shuffle)
        canonical = len(lengths)
        return {"version": STATE_VERSION, "epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                "canonical_streams": canonical, "num_episodes": len(self.episodes),
                "stream_offsets": [int(o) for o in offsets]}

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
        self._start_offsets = [int(o) for o in state["stream_offsets"]]

    # -- iteration -------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumer = self.consumer()
        pieces, _, start, quota = self.epoch_plan(consumer.count)
        streams = owned_streams(consumer.index, consumer.count, len(pieces))
        self._emitted = 0
        picks = self._consumer_picks(pieces, streams, start)
        if self.uneven == "pad":  # then repeat the epoch's samples of these streams until the quota is met
            picks = itertools.chain(picks, self._padding_picks(pieces, streams))
        readers: dict[tuple[int, int], PieceReader] = {}
        try:
            for pick in itertools.islice(picks, quota):
                yield self._sample(pieces, pick, readers)
                self._emitted += 1
        finally:
            self.frames_decoded += sum(r.decoded for r in readers.values())

    def _padding_picks(self, pieces: list[list[Piece]], streams: list[int]) -> Iterator[tuple[int, int, int]]:
        while True:
            yield from self._consumer_picks(pieces, streams, [0] * len(pieces))

    def _consumer_picks(self, pieces: list[list[Piece]], streams: list[int], start: Sequence[int]
                        ) -> Iterator[tuple[int, int, int]]:
        """(stream, piece, position) picks of one consumer: its streams round-robin (sequential if not shuffling)."""
        iterators = [self._stream_picks(pieces, s, start[s]) for s in streams]
        if not self.shuffle:
            yield from itertools.chain.from_iterable(iterators)
            return
        active = list(iterators)
        while active:
            for it in list(active):
                pick = next(it, None)
                if pick is None:
                    active.remove(it)
                else:
                    yield pick

    def _stream_picks(self, pieces: list[list[Piece]], stream: int, skip: int) -> Iterator[tuple[int, int, int]]:
        rng = rng_for(self.seed, self.epoch, PURPOSE_POOL, stream) if self.shuffle else None
        lengths = [stop - first for _, first, stop in pieces[stream]]
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
        row = int(reader.sample_rows[position])
        video = reader.frames_for(position) if self.meta.video_keys else {}
        if position == len(reader.sample_rows) - 1:
            self.frames_decoded += reader.decoded
            del readers[key]
        self.frames_delivered += sum(len(v) for v in video.values())
        return self.assembler.assemble(row, video)

    def _piece_reader(self, episode_position: int, first: int, stop: int) -> PieceReader:
        episode = self.episodes[episode_position]
        first_row, _ = self.assembler.episode_rows(episode)
        rows = first_row + piece_sample_order(first, stop, self.stride)
        needed: dict[str, list[np.ndarray]] = {k: [] for k in self.meta.video_keys}
        for row in rows.tolist():
            for k, r in self.assembler.video_rows(row).items():
                needed[k].append(r)
        return PieceReader(episode, rows, {k: np.stack(v) for k, v in needed.items()}, self._decode,
                           self.decode_ahead)

    def _decode(self, episode: int, rows_by_key: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return self.cameras.decode_many(episode, {k: self.assembler.timestamps(r) for k, r in rows_by_key.items()})

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded (finished pieces) and delivered in samples by this process."""
        return {"frames_decoded": self.frames_decoded, "frames_delivered": self.frames_delivered}

