"""StreamingLeRobotDataset: an IterableDataset that reads each episode forward, shuffles without a decoded-sample
buffer, splits the epoch over ranks and DataLoader workers, and resumes exactly from a small JSON state.

How an epoch is produced (all of it a pure function of metadata, seed, epoch and the canonical stream count):
1. Episodes are permuted by (seed, epoch) and divided into C canonical streams (plan/partition.py).
2. Each stream interleaves a pool of up to `pool_size` live pieces, each spread evenly (with random jitter) over
   the whole stream so that all end together (plan/schedule.py); each piece is read forward, its rows read when it
   goes live and its frames decoded in small batches and kept only while a later sample needs them
   (frame_source.py, piece_reader.py).
3. Consumer k of K = world_size x num_workers owns streams k, k+K, ... (segments, plan/segments.py) and reads them
   by level fill (epoch_iterator.py); worker w of every rank emits the same number of samples (pad by repeating,
   or drop, see `uneven`), so ranks get equal batch counts; a single rank emits every sample once.
4. A resume state holds, per segment, the position reached. The same layout continues exactly; any other layout
   re-cuts what remains of the epoch among its consumers: no sample repeated or skipped.

Construction reads the metadata only (info, the locating columns of the episode table, tasks): nothing of data/ or
videos/, so start-up and memory do not grow with the dataset; every process plans only from the episode lengths.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, get_worker_info

from robostream.datasets.batch_assembly import TensorSpecs, allocate_fresh
from robostream.datasets.batch_buffers import SLOT_KEY, BatchBuffers, shared_tensors
from robostream.datasets.cameras import CameraReader
from robostream.datasets.counters import FrameCounters
from robostream.datasets.epoch_iterator import EpochIterator, EpochPlan
from robostream.datasets.frame_source import FrameSource
from robostream.datasets.ranks import resolve_rank_world
from robostream.datasets.sample import SampleAssembler
from robostream.datasets.source import SourceOptions, open_dataset, resolve_episodes
from robostream.plan.layout import Consumer, auto_canonical_streams
from robostream.plan.order import epoch_episode_order
from robostream.plan.partition import Piece, group_episodes_by_files, partition_episodes, split_contiguous
from robostream.plan.resume import emitted_by_role
from robostream.plan.schedule import window_stride
from robostream.plan.segments import (
    positions_after,
    quotas_for_roles,
    recut,
    role_remaining,
    segments_from_state,
    segments_to_state,
    whole_streams,
)
from robostream.plan.windows import delta_offsets

STATE_VERSION = 2  # 1: one offset per canonical stream (still read)

# Called in the process that assembled a batch with the batch and the seconds it took; may add keys to it.
BatchHook = Callable[[dict[str, Any], float], None]


@dataclass(frozen=True)
class LoaderBatching:
    """How a loader's iteration yields whole batches (see StreamingDataLoader)."""

    batch_size: int
    drop_last: bool
    buffers: BatchBuffers | None  # shared-memory slots for worker processes; None: fresh memory
    on_batch: BatchHook | None = None


def _timed_batches(iterator: EpochIterator, batching: LoaderBatching) -> Iterator[dict[str, Any]]:
    """The iterator's batches, in reused slots when the loader has buffers, each passed to the hook with the time
    this process spent producing it (the consumer's time between two pulls is not counted)."""
    markers: list[Any] = []

    def allocate(specs: TensorSpecs) -> dict[str, torch.Tensor]:
        if batching.buffers is None:
            # A worker's batch goes to the main process: shared memory now saves a copy into it when sent.
            return allocate_fresh(specs) if get_worker_info() is None else shared_tensors(specs)
        tensors, marker = batching.buffers.allocate(specs)
        markers.append(marker)
        return tensors

    batches = iterator.batches(batching.batch_size, batching.drop_last, allocate)
    while True:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return
        marker = markers.pop() if markers else None
        if marker is not None:
            batch[SLOT_KEY] = marker
        if batching.on_batch is not None:
            batching.on_batch(batch, time.perf_counter() - started)
        yield batch


class StreamingLeRobotDataset(IterableDataset):
    """Iterable, resumable, rank- and worker-aware reader of a LeRobot v3.0 dataset (same samples as map-style)."""

    def __init__(self, repo_id: str | None = None, *, root: str | Path | None = None, revision: str | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 shuffle: bool = True, seed: int = 0,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None, return_uint8: bool = False,
                 video_backend: Literal["torchcodec", "pyav"] | None = None, video_decode_device: str = "cpu",
                 pool_size: int = 8, canonical_streams: int | None = None, uneven: Literal["pad", "drop"] = "pad",
                 partition: Literal["contiguous", "files"] = "contiguous", decode_ahead: int = 4,
                 prefetch_pieces: int = 2, video_decoder_cache_size: int | None = None,
                 source: SourceOptions | None = None, rank: int | None = None, world_size: int | None = None) -> None:
        """
        Args:
            repo_id: a Hub dataset ("owner/name"): lerobot's local copy when there is one, else read from the Hub.
            root: a local folder or URL (hf://, s3://, http(s)://, file://) of the dataset; wins over repo_id.
            revision: the Hub revision of repo_id, pinned to its commit at construction.
            episodes: episode indices to read (default all).
            delta_timestamps: per key, offsets in seconds (multiples of 1/fps) of a window around each frame.
            tolerance_s: how far a decoded frame's timestamp may be from the asked one before it is an error.
            shuffle: a random order per (seed, epoch); False reads episodes chronologically.
            seed: the order is a pure function of (seed, epoch, canonical streams).
            image_transforms: applied to every camera tensor.
            return_uint8: keep cameras uint8 (4x less memory and transport than float32).
            video_backend: "torchcodec" (default) or "pyav".
            video_decode_device: "cpu", or "cuda"/"cuda:N" for NVDEC.
            pool_size: live pieces per canonical stream. Memory: a consumer holds pool_size x C/K pieces, each
                about (window span / window stride + 1 + decode_ahead) decoded frames per camera (single mode,
                3 cameras 256x256: ~2.9 MiB). Randomness: a batch mixes up to min(batch, pool_size x C/K) episodes.
            canonical_streams: C, the streams an epoch is cut into (default lcm(consumers, 12) at the first start,
                then kept in the resume state). More streams mix more episodes per consumer, cut more in two.
            uneven: how ranks are kept at equal batch counts: "pad" repeats a few samples on ranks that have fewer,
                "drop" skips the few extra on the others.
            partition: "contiguous" (balanced streams, default) or "files" (whole-file groups; needs >= C groups).
            decode_ahead: samples of a piece whose missing frames are decoded together: each piece's frames are
                decoded in runs of this many samples, one seek per run (memory vs seeks: 8 is ~10% faster than 4
                on cheap-to-decode video, for ~2x the decoded frames held).
            prefetch_pieces: upcoming pieces per stream whose rows and video bytes are fetched in background
                threads (remote data only), within the read buffer.
            video_decoder_cache_size: open decoders kept per process (default: 2 per camera).
            source: how bytes are read (remote options, disk cache, read buffer); see SourceOptions.
            rank, world_size: this process's rank (default: torch.distributed, else RANK/WORLD_SIZE, else 0 of 1).
        """
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={uneven!r}: expected 'pad' (repeat samples) or 'drop' (skip the tail)")
        if partition not in ("contiguous", "files"):
            raise ValueError(f"partition={partition!r}: expected 'contiguous' or 'files'")
        if pool_size < 1 or decode_ahead < 1:
            raise ValueError(f"pool_size ({pool_size}) and decode_ahead ({decode_ahead}) must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank= and world_size=, or neither (then they are resolved automatically)")
        self.meta = open_dataset(repo_id, root, revision, source, video_backend, "StreamingLeRobotDataset")
        self.root = self.meta.root
        self.episodes = resolve_episodes(self.meta, episodes)
        self.shuffle, self.seed = shuffle, seed
        self.pool_size, self.uneven, self.partition = pool_size, uneven, partition
        self.canonical_streams = canonical_streams
        self.prefetch_pieces = prefetch_pieces
        self._rank_world = (rank, world_size) if rank is not None else None
        offsets = delta_offsets(delta_timestamps, self.meta.fps, tolerance_s,
                                list(self.meta.info.features)) if delta_timestamps else {}
        self.delta_timestamps = dict(delta_timestamps or {})
        self.lengths = self.meta.episodes.lengths_of(self.episodes)
        self.counters = FrameCounters()
        self.cameras = CameraReader(self.meta, tolerance_s, video_backend, video_decode_device,
                                    video_decoder_cache_size)
        stride = window_stride([offsets[k] for k in self.meta.video_keys if k in offsets]) if shuffle else 1
        self.source = FrameSource(self.meta, assembler=SampleAssembler(self.meta, offsets, return_uint8,
                                                                       image_transforms),
                                  cameras=self.cameras, counters=self.counters, stride=stride,
                                  decode_ahead=decode_ahead, prefetch=prefetch_pieces > 0)
        self.epoch = 0
        self._resume: dict[str, Any] | None = None  # where the next __iter__ continues from
        self._iterator: EpochIterator | None = None  # this process's current pass
        self._batching: LoaderBatching | None = None  # set while a StreamingDataLoader starts its iteration

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
        """Segments, their positions and every consumer role's quota for the coming iteration."""
        consumers = world_size * num_workers
        canonical = self.resolved_canonical_streams(consumers)
        pieces = self.stream_pieces(canonical)
        natural = [sum(stop - first for _, first, stop in stream) for stream in pieces]
        resume = self._resume
        if resume is None:
            segments = whole_streams(natural, consumers)
            positions = segments.lo.copy()
        else:
            layout = resume["layout"]
            segments, positions = segments_from_state(resume["segments"], natural, layout[0] * layout[1])
            if layout == [world_size, num_workers]:
                # Same layout: every consumer continues exactly where it was, rotated to whose batch comes next.
                return EpochPlan(pieces, natural, segments, positions, list(resume["quota_left"]),
                                 list(resume["repeats_done"]), int(resume["worker_rotation"]))
            segments, positions = recut(segments, positions, consumers)  # another layout takes over what remains
        # Fresh epoch or new layout: quotas that give every rank the same batches (pad repeats, drop cuts).
        quotas = quotas_for_roles(role_remaining(segments, positions, consumers), world_size, num_workers,
                                  self.uneven)
        return EpochPlan(pieces, natural, segments, positions, quotas, [0] * consumers, 0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration produces (clears a resume state of another epoch)."""
        if epoch != self.epoch:
            self._resume = None
        self.epoch = epoch

    # -- resume ----------------------------------------------------------------------------------------------
    def state_dict(self, *, batches: int | None = None, batch_size: int = 1, num_workers: int = 1
                   ) -> dict[str, Any]:
        """A small JSON-serialisable state: each segment's position plus what the layout still owes.

        Args:
            batches: batches the training loop consumed on each rank in this pass (StreamingDataLoader passes it);
                None describes in-process iteration (no DataLoader, this process's own count).
            batch_size: the loader's batch size.
            num_workers: the loader's workers (1 without workers).
        """
        _, world = self._rank_world or resolve_rank_world()
        plan = self.epoch_plan(world, num_workers)
        consumers = world * num_workers
        if batches is None:  # ranks consume in lockstep: in-process iteration on this rank stands for every one
            emitted = [self._iterator.emitted if self._iterator is not None else 0] * consumers
            batches = 0
        else:
            emitted = emitted_by_role(batches, plan.quotas, batch_size, world, num_workers, plan.rotation)
        positions = positions_after(plan.segments, plan.positions, consumers, emitted, interleaved=self.shuffle)
        left = role_remaining(plan.segments, plan.positions, consumers)
        repeats = [done + max(0, e - n) for done, e, n in zip(plan.repeats_done, emitted, left)]
        return {"version": STATE_VERSION, "epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                "num_episodes": len(self.episodes), "canonical_streams": len(plan.pieces),
                "segments": segments_to_state(plan.segments, positions), "layout": [world, num_workers],
                "quota_left": [int(q - e) for q, e in zip(plan.quotas, emitted)],
                "repeats_done": [int(r) for r in repeats],
                "worker_rotation": int((plan.rotation + batches) % num_workers)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` at the next iteration, on this layout or any other."""
        if state.get("version") not in (1, STATE_VERSION):
            raise ValueError(f"resume state version {state.get('version')!r}; this robostream reads 1 and "
                             f"{STATE_VERSION}")
        for key in ("seed", "shuffle", "num_episodes"):
            mine = len(self.episodes) if key == "num_episodes" else getattr(self, key)
            if state[key] != mine:
                raise ValueError(f"resume state has {key}={state[key]!r} but this dataset has {key}={mine!r}; "
                                 "a stream can only resume over the same episodes, seed and shuffle setting")
        self.epoch = int(state["epoch"])
        self.canonical_streams = int(state["canonical_streams"])
        resume = {k: state[k] for k in ("layout", "quota_left", "repeats_done", "worker_rotation")}
        natural = [sum(b - a for _, a, b in s) for s in self.stream_pieces(self.canonical_streams)]
        consumers = state["layout"][0] * state["layout"][1]
        if state["version"] == 1:  # whole streams owned round-robin by the saved layout, one offset each
            offsets = state["stream_offsets"]
            if len(offsets) != self.canonical_streams:
                raise ValueError("resume state: stream_offsets must have one entry per canonical stream")
            resume["segments"] = [[s, 0, n, s % consumers, int(offsets[s])] for s, n in enumerate(natural) if n]
        else:
            resume["segments"] = state["segments"]
        if not len(resume["quota_left"]) == len(resume["repeats_done"]) == consumers:
            raise ValueError(f"resume state: quota_left and repeats_done need one entry per consumer of the saved "
                             f"layout {state['layout']} ({consumers})")
        segments_from_state(resume["segments"], natural, consumers)  # fails now, naming the bad row
        self._resume = resume

    # -- iteration -------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumer = self.consumer()
        plan = self.epoch_plan(consumer.world_size, consumer.num_workers)
        # After a same-layout resume, worker j plays the role of the worker whose batch comes next.
        role = consumer.rank * consumer.num_workers + (consumer.worker + plan.rotation) % consumer.num_workers
        self._iterator = EpochIterator(plan, role=role, worker=consumer.worker, source=self.source,
                                       counters=self.counters, episodes=self.episodes, seed=self.seed,
                                       epoch=self.epoch, shuffle=self.shuffle, pool_size=self.pool_size,
                                       prefetch_pieces=self.prefetch_pieces)
        if self._batching is None:
            return iter(self._iterator)
        return _timed_batches(self._iterator, self._batching)

    @property
    def assembles_batches(self) -> bool:
        """Whether a loader can have whole batches assembled here (not with image_transforms, which run per
        sample)."""
        return self.source.batches is not None

    @contextlib.contextmanager
    def batching(self, batching: LoaderBatching) -> Iterator[None]:
        """Iterations started inside yield whole batches (StreamingDataLoader wraps its iterator's creation:
        worker processes copy the dataset then, and in-process loading calls iter() then)."""
        if not self.assembles_batches:
            raise ValueError("this dataset has image_transforms, which run per sample: batch it with a collate")
        self._batching = batching
        try:
            yield
        finally:
            self._batching = None

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded and delivered over this process and its DataLoader workers, the peak decoded-frame
        working set (of one live piece, of all live pieces of a worker, the most pieces live at once), and for
        remote data the bytes read, the time readers waited for them (us) and the peak bytes of fetched blocks
        held by a worker."""
        return self.counters.totals()
