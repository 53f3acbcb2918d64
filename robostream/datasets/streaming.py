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
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from robostream.datasets.batch_assembly import TensorSpecs, allocate_fresh
from robostream.datasets.batch_buffers import SLOT_KEY, BatchBuffers, shared_tensors
from robostream.datasets.cameras import CameraReader
from robostream.datasets.counters import FrameCounters
from robostream.datasets.epoch_iterator import EpochIterator, EpochPlan
from robostream.datasets.lanes import LaneIterator, LanePlan
from robostream.datasets.frame_source import FrameSource
from robostream.datasets.ranks import resolve_rank_world
from robostream.datasets.mixture import (ReaderSettings, Source, SourceReader, mixture_fingerprint, open_reader,
                                         selection_fingerprint)
from robostream.datasets.mixture_schema import FeatureMode, MixtureBatches, MixtureSchema, SchemaMode, source_specs
from robostream.datasets.source import SourceOptions
from robostream.format.metadata import DatasetMetadata
from robostream.plan.mixture import (
    EpochUnits,
    SamplingMethod,
    epoch_units,
    lane_batches_taken,
    lane_schedule,
    samples_per_source,
)
from robostream.numbers import finite_number
from robostream.process_local import ProcessLocal
from robostream.video.layout import FramePool
from robostream.plan.layout import Consumer, auto_canonical_streams
from robostream.plan.order import epoch_episode_order
from robostream.plan.partition import Piece, group_episodes_by_files, partition_episodes, split_contiguous
from robostream.plan.resume import emitted_by_role
from robostream.plan.state import CHECKSUM, check_epoch_state, check_state_head, state_checksum
from robostream.plan.segments import (
    positions_after,
    quotas_for_roles,
    recut,
    role_remaining,
    segments_from_state,
    segments_to_state,
    whole_streams,
)

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


def _timed_batches(iterator: EpochIterator | LaneIterator, batching: LoaderBatching) -> Iterator[dict[str, Any]]:
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
    """Iterable, resumable, rank- and worker-aware reader of a LeRobot v3.0 dataset, or of a weighted mixture of
    several (same samples as map-style; a mixture's samples also carry `dataset_index`)."""

    def __init__(self, repo_id: str | None = None, *, root: str | Path | None = None, revision: str | None = None,
                 episodes: Sequence[int] | None = None, sources: Sequence[Source] | None = None,
                 epoch_size: int | None = None, sampling_method: SamplingMethod = "balanced",
                 features: FeatureMode = "strict", batching: Literal["random", "per_stream"] = "random",
                 batch_size: int | None = None,
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
            sources: a mixture instead of one dataset (then no repo_id/root/revision/episodes): each Source names a
                dataset, its weight (proportion, repeat or choose), episodes, windows and feature_map. An epoch
                takes exactly its per-source counts (full passes plus one partial pass without repeats, whole
                episodes where it can), shuffled together; samples carry `dataset_index` (int64, 0-d).
            epoch_size: samples per epoch of a mixture weighted by proportion (default: the sources' total).
            sampling_method: a mixture's partial passes: "balanced" (a new subset every epoch) or "fixed" (the same).
            features: "strict" (sources must have the same keys, dtypes and shapes after their feature_map) or
                "union" (a key a source lacks is zeros there, with `<key>_is_pad` True).
            batching: how a mixture's sources share batches: "random" (samples of all sources shuffled together:
                the mixture holds in expectation in every batch) or "per_stream" (every global batch, i.e. the
                batches of all ranks at one step, from one source, in a random order of sources; sources may then
                differ in keys and shapes). per_stream needs batch_size, and plans each source apart: a consumer
                keeps live pieces of every source, so memory grows with the number of sources.
            batch_size: the loader's batch size, needed to plan batching="per_stream".
            delta_timestamps: per key, offsets in seconds (multiples of 1/fps) of a window around each frame (a
                mixture: common key names, resolved with each source's own fps).
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
            video_decoder_cache_size: open decoders kept per process and source (default: 2 per camera).
            source: how bytes are read (remote options, disk cache, read buffer); see SourceOptions. A mixture's
                default for sources without their own `options`.
            rank, world_size: this process's rank (default: torch.distributed, else RANK/WORLD_SIZE, else 0 of 1).
        """
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={uneven!r}: expected 'pad' (repeat samples) or 'drop' (skip the tail)")
        if partition not in ("contiguous", "files"):
            raise ValueError(f"partition={partition!r}: expected 'contiguous' or 'files'")
        for name, value, least in (("pool_size", pool_size, 1), ("decode_ahead", decode_ahead, 1),
                                   ("prefetch_pieces", prefetch_pieces, 0), ("seed", seed, 0)):
            finite_number(value, what=name, integer=True, minimum=least)
        if canonical_streams is not None:
            finite_number(canonical_streams, what="canonical_streams", integer=True, minimum=1)
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank= and world_size=, or neither (then they are resolved automatically)")
        if batching not in ("random", "per_stream"):
            raise ValueError(f"batching={batching!r}: expected 'random' or 'per_stream'")
        if batching == "per_stream":
            if sources is None:
                raise ValueError("batching='per_stream' draws each batch from one source of a mixture: pass sources=")
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ValueError(f"batching='per_stream' needs batch_size= (the loader's), got {batch_size!r}")
            if features != "strict":
                raise ValueError("batching='per_stream' never mixes sources in a batch, so each keeps its own keys: "
                                 "features= applies to batching='random'")
        elif batch_size is not None:
            raise ValueError("batch_size= plans batching='per_stream'; otherwise the loader's batch_size applies")
        self.batching_method, self.batch_size = batching, batch_size
        self.is_mixture = sources is not None
        if self.is_mixture:
            given = [n for n, v in (("repo_id", repo_id), ("root", root), ("revision", revision),
                                    ("episodes", episodes)) if v is not None]
            if given or not sources:
                raise ValueError(f"sources= names a mixture: pass at least one Source and no {given or 'repo_id'} "
                                 "(each Source has its own)")
            specs = list(sources)
        else:
            if epoch_size is not None:
                raise ValueError("epoch_size applies to a mixture (sources=); one dataset's epoch is all its samples")
            specs = [Source(repo_id=repo_id, root=root, revision=revision, episodes=episodes)] \
                if root is not None or repo_id is not None else []
            if not specs:
                raise ValueError("StreamingLeRobotDataset needs root= (a local folder or URL), repo_id= or sources=")
        self.shuffle, self.seed = shuffle, seed
        self.pool_size, self.uneven, self.partition = pool_size, uneven, partition
        self.canonical_streams = canonical_streams
        self.prefetch_pieces = prefetch_pieces
        self.sampling_method, self.epoch_size, self.features = sampling_method, epoch_size, features
        self._rank_world = (rank, world_size) if rank is not None else None
        self.delta_timestamps = dict(delta_timestamps or {})
        self.counters = FrameCounters()
        settings = ReaderSettings(options=source, delta_timestamps=self.delta_timestamps, tolerance_s=tolerance_s,
                                  return_uint8=return_uint8, image_transforms=image_transforms,
                                  video_backend=video_backend, video_decode_device=video_decode_device,
                                  decoder_cache_size=video_decoder_cache_size, decode_ahead=decode_ahead,
                                  prefetch=prefetch_pieces > 0, shuffle=shuffle, counters=self.counters,
                                  frame_pool=ProcessLocal(FramePool), storages=[])
        self.sources = [open_reader(i, spec, settings, lenient_windows=self.is_mixture)
                        for i, spec in enumerate(specs)]
        weights = [spec.weight for spec in specs]
        self.samples_per_source = samples_per_source([int(r.lengths.sum()) for r in self.sources], weights,
                                                     epoch_size)
        self.schema = self.batches_of_mixture = None
        self.fingerprint = None
        self.dataset_fingerprint = None if self.is_mixture else selection_fingerprint(self.sources[0])
        if self.is_mixture:
            self.schema = mixture_schema(self.sources, self.delta_timestamps,
                                         "separate" if batching == "per_stream" else features, return_uint8)
            if image_transforms is None:
                self.batches_of_mixture = MixtureBatches(self.schema, [r.frames.batches for r in self.sources],
                                                         [r.rename for r in self.sources])
            self.fingerprint = mixture_fingerprint(self.sources, weights, self.samples_per_source,
                                                   epoch_size=epoch_size, sampling_method=sampling_method,
                                                   features=features, batching=batching, batch_size=batch_size)
        self.epoch = 0
        self._resume: dict[str, Any] | None = None  # where the next __iter__ continues from
        self._iterator: EpochIterator | LaneIterator | None = None  # this process's current pass
        self._batching: LoaderBatching | None = None  # set while a StreamingDataLoader starts its iteration

    # -- one dataset (not a mixture) ---------------------------------------------------------------------------
    def _only(self) -> SourceReader:
        if self.is_mixture:
            raise AttributeError("a mixture has one metadata, episode selection and decoder set per source: use "
                                 "dataset.sources[i].meta / .episodes / .cameras / .frames")
        return self.sources[0]

    @property
    def meta(self) -> DatasetMetadata:
        return self._only().meta

    @property
    def root(self) -> str:
        return self._only().meta.root

    @property
    def episodes(self) -> list[int]:
        return self._only().episodes

    @property
    def lengths(self) -> np.ndarray:
        return self._only().lengths

    @property
    def cameras(self) -> CameraReader:
        return self._only().cameras

    @property
    def source(self) -> FrameSource:
        return self._only().frames

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

    def epoch_units(self) -> EpochUnits:
        """The frame ranges this epoch reads: every selected episode whole for one dataset; for a mixture each
        source's full passes and partial pass (plan/mixture.py)."""
        return epoch_units([r.lengths for r in self.sources], self.samples_per_source, seed=self.seed,
                           epoch=self.epoch, sampling_method=self.sampling_method)

    def stream_pieces(self, canonical: int, units: EpochUnits | None = None, lane: int = 0) -> list[list[Piece]]:
        """Pieces (unit, first, stop: frames relative to the unit) of every canonical stream in this epoch (of one
        source's `units` for a lane of batching="per_stream")."""
        units = self.epoch_units() if units is None else units
        order = epoch_episode_order(len(units), self.seed, self.epoch, self.shuffle, lane)
        if self.partition == "contiguous":
            return split_contiguous(order, units.length, canonical)
        files = []
        for s, episode in zip(units.source.tolist(), units.episode.tolist()):
            reader = self.sources[s]
            index = reader.episodes[episode]
            files.append([(s, reader.meta.data_file(index))]
                         + [(s, reader.meta.video_file(index, k)) for k in reader.meta.video_keys])
        groups = group_episodes_by_files(files)
        if len(groups) < canonical:
            raise ValueError(
                f"partition='files': episodes sharing files form {len(groups)} groups, fewer than the "
                f"{canonical} canonical streams (files of different cameras roll over at different episodes); "
                f"use partition='contiguous' or fewer canonical streams")
        order_rank = {int(p): i for i, p in enumerate(order)}  # a stream visits its groups in epoch order
        bins = partition_episodes([int(units.length[g].sum()) for g in groups], canonical)
        return [[(p, 0, int(units.length[p])) for gi in sorted(b, key=lambda gi: order_rank[groups[gi][0]])
                 for p in groups[gi]] for b in bins]

    def epoch_plan(self, world_size: int, num_workers: int) -> EpochPlan:
        """Segments, their positions and every consumer role's quota for the coming iteration (batching="random")."""
        if self.batching_method == "per_stream":
            raise ValueError("batching='per_stream' plans one lane per source: see lane_plan()")
        consumers = world_size * num_workers
        return self._plan(self.epoch_units(), self.resolved_canonical_streams(consumers), self._resume, world_size,
                          num_workers)

    def _plan(self, units: EpochUnits, canonical: int, resume: Mapping[str, Any] | None, world_size: int,
              num_workers: int, lane: int = 0) -> EpochPlan:
        """The plan of `units` cut into `canonical` streams, continuing `resume` (one lane's state) if given."""
        consumers = world_size * num_workers
        pieces = self.stream_pieces(canonical, units, lane)
        natural = [sum(stop - first for _, first, stop in stream) for stream in pieces]
        if resume is None:
            segments = whole_streams(natural, consumers)
            positions = segments.lo.copy()
        else:
            layout = resume["layout"]
            segments, positions = segments_from_state(resume["segments"], natural, layout[0] * layout[1])
            if layout == [world_size, num_workers]:
                # Same layout: every consumer continues exactly where it was, rotated to whose batch comes next.
                return EpochPlan(units, pieces, natural, segments, positions, list(resume["quota_left"]),
                                 list(resume["repeats_done"]), int(resume["worker_rotation"]))
            segments, positions = recut(segments, positions, consumers)  # another layout takes over what remains
        # Fresh epoch or new layout: quotas that give every rank the same batches (pad repeats, drop cuts).
        quotas = quotas_for_roles(role_remaining(segments, positions, consumers), world_size, num_workers,
                                  self.uneven)
        return EpochPlan(units, pieces, natural, segments, positions, quotas, [0] * consumers, 0)

    def lane_plan(self, world_size: int, num_workers: int) -> LanePlan:
        """batching="per_stream": each source's plan (a lane) and every worker role's schedule of lanes."""
        consumers = world_size * num_workers
        canonical = self.resolved_canonical_streams(consumers)
        units = self.epoch_units()
        resume = self._resume
        same = resume is not None and resume["layout"] == [world_size, num_workers]
        lanes: list[EpochPlan | None] = []
        for s in range(len(self.sources)):
            lane_units = units.of_source(s)
            total = int(lane_units.length.sum())
            lane_state = None if resume is None else resume["lanes"][s]
            context = None if lane_state is None else {"layout": resume["layout"],
                                                       "worker_rotation": resume["worker_rotation"], **lane_state}
            lanes.append(self._plan(lane_units, min(canonical, total), context, world_size, num_workers, lane=s)
                         if total else None)
        if same:
            schedule = resume["schedule"]
            batches, done, generation = schedule["batches"], schedule["done"], int(schedule["generation"])
            rotation = int(resume["worker_rotation"])
        else:  # fresh epoch or new layout: each worker's batches per lane from its quotas (the last one short)
            generation = 0 if resume is None else int(resume["schedule"]["generation"]) + 1
            batches = [[-(-lane.quotas[w] // self.batch_size) if lane is not None else 0 for lane in lanes]
                       for w in range(num_workers)]
            done, rotation = [0] * num_workers, 0
        schedules = [lane_schedule(batches[w], seed=self.seed, epoch=self.epoch, worker=w, generation=generation,
                                   shuffle=self.shuffle) for w in range(num_workers)]
        return LanePlan(lanes, [list(b) for b in batches], list(done), generation, rotation, schedules)

    @staticmethod
    def _advanced(plan: EpochPlan, emitted: Sequence[int], consumers: int, interleaved: bool) -> dict[str, Any]:
        """A plan's state once every role emitted emitted[role] samples of it."""
        positions = positions_after(plan.segments, plan.positions, consumers, emitted, interleaved=interleaved)
        left = role_remaining(plan.segments, plan.positions, consumers)
        repeats = [done + max(0, e - n) for done, e, n in zip(plan.repeats_done, emitted, left)]
        return {"segments": segments_to_state(plan.segments, positions),
                "quota_left": [int(q - e) for q, e in zip(plan.quotas, emitted)],
                "repeats_done": [int(r) for r in repeats]}

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration produces (clears a resume state of another epoch)."""
        finite_number(epoch, what="epoch", integer=True, minimum=0)
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
        consumers = world * num_workers
        identity = {"mixture": self.fingerprint} if self.is_mixture else {
            "num_episodes": len(self.episodes), "dataset": self.dataset_fingerprint}
        head = {"version": STATE_VERSION, "epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                **identity, "canonical_streams": self.resolved_canonical_streams(consumers),
                "layout": [world, num_workers]}
        if self.batching_method == "per_stream":
            return _checksummed({**head, **self._lane_state(world, num_workers, batches, batch_size)})
        plan = self.epoch_plan(world, num_workers)
        if batches is None:  # ranks consume in lockstep: in-process iteration on this rank stands for every one
            emitted = [self._iterator.emitted if self._iterator is not None else 0] * consumers
            batches = 0
        else:
            emitted = emitted_by_role(batches, plan.quotas, batch_size, world, num_workers, plan.rotation)
        return _checksummed({**head, **self._advanced(plan, emitted, consumers, self.shuffle),
                             "worker_rotation": int((plan.rotation + batches) % num_workers)})

    def _lane_state(self, world: int, num_workers: int, batches: int | None, batch_size: int) -> dict[str, Any]:
        """The per_stream part of a state: each lane's positions and every worker role's place in its schedule."""
        plan = self.lane_plan(world, num_workers)
        if batches is None:  # in-process iteration: whole batches of this rank's own pass
            iterator = self._iterator
            if iterator is not None and iterator.in_batch:
                raise ValueError(f"batching='per_stream' resumes at batch boundaries; {iterator.in_batch} samples "
                                 f"of a batch of {self.batch_size} were taken")
            batches = iterator.batches_done if iterator is not None else 0
        elif batch_size != self.batch_size:
            raise ValueError(f"batching='per_stream' was planned for batch_size={self.batch_size}, the loader uses "
                             f"{batch_size}")
        consumers = world * num_workers
        taken = lane_batches_taken(plan.schedules, plan.done, batches, plan.rotation)
        lanes = []
        for s, lane in enumerate(plan.lanes):
            emitted = [min(q, int(taken[k % num_workers][s]) * self.batch_size)
                       for k, q in enumerate(lane.quotas)] if lane is not None else []
            lanes.append(self._advanced(lane, emitted, consumers, self.shuffle) if lane is not None else None)
        return {"batching": "per_stream", "lanes": lanes,
                "schedule": {"generation": plan.generation, "batches": plan.batches,
                             "done": [d + int(t.sum()) for d, t in zip(plan.done, taken)]},
                "worker_rotation": int((plan.rotation + batches) % num_workers)}

    def load_state_dict(self, state: Mapping[str, Any], *,
                        on_mixture_change: Literal["error", "next_epoch"] = "error") -> None:
        """Continue from `state` at the next iteration, on this layout or any other.

        Args:
            state: a `state_dict()`.
            on_mixture_change: a state made with another mixture (other sources or revisions, selections,
                weights, epoch size, sampling or feature mode) cannot continue its epoch: "error" refuses it,
                "next_epoch" starts this mixture at the epoch after the state's.
        """
        if not isinstance(state, Mapping) or state.get("version") not in (1, STATE_VERSION):
            version = state.get("version") if isinstance(state, Mapping) else state
            raise ValueError(f"resume state version {version!r}; this robostream reads 1 and {STATE_VERSION}")
        if on_mixture_change not in ("error", "next_epoch"):
            raise ValueError(f"on_mixture_change={on_mixture_change!r}: expected 'error' or 'next_epoch'")
        check_state_head(state, lanes=self.batching_method == "per_stream")
        if CHECKSUM in state and state[CHECKSUM] != state_checksum(state):
            raise ValueError(f"resume state: checksum {state[CHECKSUM]!r} does not match its content; the state "
                             "was edited or corrupted after it was saved: use the checkpoint's original state")
        if state.get("mixture") != self.fingerprint:
            if on_mixture_change == "next_epoch" and self.is_mixture and "mixture" in state:
                self.set_epoch(int(state["epoch"]) + 1)
                self._resume = None
                return
            raise ValueError(
                f"resume state was made with {_identity(state.get('mixture'))} but this dataset is "
                f"{_identity(self.fingerprint)}: its epoch cannot continue with other sources, revisions, episodes, "
                "weights, epoch_size, sampling_method or features; pass on_mixture_change='next_epoch' to apply "
                "this mixture from the next epoch, or rebuild the mixture the state was made with")
        if not self.is_mixture:
            self._check_dataset_identity(state)
        for key in ("seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"resume state has {key}={state[key]!r} but this dataset has "
                                 f"{key}={getattr(self, key)!r}; a stream only resumes with the same seed and shuffle")
        if state.get("batching", "random") != self.batching_method:
            raise ValueError(f"resume state was made with batching={state.get('batching', 'random')!r}, this "
                             f"dataset uses batching={self.batching_method!r}")
        # The state's epoch and stream count shape the plan it is checked against: set them only once it holds.
        before = self.epoch, self.canonical_streams
        self.epoch, self.canonical_streams = int(state["epoch"]), int(state["canonical_streams"])
        try:
            self._resume = self._checked_resume(state)
        except BaseException:
            self.epoch, self.canonical_streams = before
            raise

    def _check_dataset_identity(self, state: Mapping[str, Any]) -> None:
        """One dataset: the state must come from the same episode selection (ids and lengths)."""
        if "dataset" in state:
            if state["dataset"] != self.dataset_fingerprint:
                raise ValueError(
                    f"resume state was made with another dataset or episode selection (fingerprint "
                    f"{state['dataset']!r}; this one, {len(self.episodes)} episodes of {self.meta.root}, is "
                    f"{self.dataset_fingerprint!r}): its epoch would skip or repeat samples here. Resume with the "
                    "dataset and episodes= it was saved with, or start a new epoch without the state")
            return
        warnings.warn("resume state of an older robostream (no dataset fingerprint): only its episode count is "
                      "checked against this dataset", RuntimeWarning, stacklevel=3)
        if state.get("num_episodes") != len(self.episodes):
            raise ValueError(f"resume state has num_episodes={state.get('num_episodes')!r} but this dataset has "
                             f"{len(self.episodes)}; a stream can only resume over the same episodes")

    def _checked_resume(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The resume of `state` (batching="random"), checked against this epoch's streams."""
        consumers = state["layout"][0] * state["layout"][1]
        if self.batching_method == "per_stream":
            return self._checked_lanes(state, consumers)
        resume = {k: state[k] for k in ("layout", "quota_left", "repeats_done", "worker_rotation")}
        natural = [sum(b - a for _, a, b in s) for s in self.stream_pieces(self.canonical_streams)]
        if state["version"] == 1:  # whole streams owned round-robin by the saved layout, one offset each
            offsets = state["stream_offsets"]
            if not isinstance(offsets, list) or len(offsets) != self.canonical_streams:
                raise ValueError("resume state: stream_offsets must have one entry per canonical stream")
            resume["segments"] = [[s, 0, n, s % consumers, offsets[s]] for s, n in enumerate(natural) if n]
        else:
            resume["segments"] = state["segments"]
        check_epoch_state(resume["segments"], natural, state["layout"], resume["quota_left"],
                          resume["repeats_done"], self.uneven)
        return resume

    def _checked_lanes(self, state: Mapping[str, Any], consumers: int) -> dict[str, Any]:
        """The per_stream resume of `state`, validated against this epoch's lanes (errors name the bad part)."""
        units = self.epoch_units()
        lanes, schedule = state["lanes"], state["schedule"]
        workers = state["layout"][1]
        if len(lanes) != len(self.sources):
            raise ValueError(f"resume state: {len(lanes)} lanes for {len(self.sources)} sources")
        if not len(schedule["batches"]) == len(schedule["done"]) == workers:
            raise ValueError(f"resume state: schedule needs one entry per worker of the layout {state['layout']}")
        for s, lane in enumerate(lanes):
            lane_units = units.of_source(s)
            total = int(lane_units.length.sum())
            if (lane is None) != (total == 0):
                raise ValueError(f"resume state: lane {s} does not match source {self.sources[s].label}")
            if lane is None:
                continue
            pieces = self.stream_pieces(min(self.canonical_streams, total), lane_units, s)
            natural = [sum(b - a for _, a, b in stream) for stream in pieces]
            if not isinstance(lane, Mapping) or not {"segments", "quota_left", "repeats_done"} <= set(lane):
                raise ValueError(f"resume state: lane {s} must hold segments, quota_left and repeats_done")
            check_epoch_state(lane["segments"], natural, state["layout"], lane["quota_left"], lane["repeats_done"],
                              self.uneven, where=f"resume state lane {s}")
        return {k: state[k] for k in ("layout", "worker_rotation", "lanes", "schedule")}

    # -- iteration -------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumer = self.consumer()
        if self.batching_method == "per_stream":
            lanes = self.lane_plan(consumer.world_size, consumer.num_workers)
            rotation = lanes.rotation
        else:
            plan = self.epoch_plan(consumer.world_size, consumer.num_workers)
            rotation = plan.rotation
        # After a same-layout resume, worker j plays the role of the worker whose batch comes next.
        role = consumer.rank * consumer.num_workers + (consumer.worker + rotation) % consumer.num_workers

        def pass_over(plan: EpochPlan) -> EpochIterator:
            return EpochIterator(plan, role=role, worker=consumer.worker, sources=self.sources,
                                 schema=self.schema, mixture_batches=self.batches_of_mixture,
                                 counters=self.counters, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                                 pool_size=self.pool_size, prefetch_pieces=self.prefetch_pieces)

        if self.batching_method == "per_stream":
            self._iterator = LaneIterator(lanes, [pass_over(p) if p is not None else None for p in lanes.lanes],
                                          role % consumer.num_workers, self.batch_size)
        else:
            self._iterator = pass_over(plan)
        if self._batching is None:
            return iter(self._iterator)
        return _timed_batches(self._iterator, self._batching)

    @property
    def assembles_batches(self) -> bool:
        """Whether a loader can have whole batches assembled here (not with image_transforms, which run per
        sample)."""
        return self.sources[0].frames.batches is not None

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

    def source_stats(self, index: int = 0) -> dict[str, dict[str, np.ndarray]]:
        """Normalisation statistics (meta/stats.json) of source `index` (of the dataset itself when it is not a
        mixture), under the mixture's common key names."""
        return self.sources[index].stats

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded and delivered over this process and its DataLoader workers, the peak decoded-frame
        working set (of one live piece, of all live pieces of a worker, the most pieces live at once), and for
        remote data the bytes read, the time readers waited for them (us) and the peak bytes of fetched blocks
        held by a worker."""
        return self.counters.totals()


def _checksummed(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, CHECKSUM: state_checksum(state)}


def _identity(fingerprint: str | None) -> str:
    return "one dataset (no mixture)" if fingerprint is None else f"the mixture {fingerprint}"


def mixture_schema(sources: Sequence[SourceReader], delta_timestamps: Mapping[str, Sequence[float]],
                   features: SchemaMode, return_uint8: bool) -> MixtureSchema:
    """The mixture's common keys, checked across its sources (errors name the key and the sources)."""
    specs = []
    for reader in sources:
        windows = {reader.rename.get(k, k): len(v) for k, v in reader.delta_timestamps.items()}
        specs.append(source_specs(reader.meta, reader.rename, windows, reader.label))
    known = {k for spec in specs for k in spec}
    unknown = [k for k in delta_timestamps if k not in known]
    if unknown:
        raise ValueError(f"delta_timestamps keys {unknown} are features of no source; the mixture's keys: "
                         f"{sorted(known)}")
    return MixtureSchema([r.meta for r in sources], specs, [r.rename for r in sources],
                         [r.label for r in sources], features, return_uint8)
