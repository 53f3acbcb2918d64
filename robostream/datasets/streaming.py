"""StreamingLeRobotDataset: an IterableDataset that reads each episode forward, shuffles without a decoded-sample
buffer, splits the epoch over ranks and DataLoader workers, and resumes exactly from a small JSON state.

How an epoch is produced (all of it a pure function of metadata, seed, epoch and the canonical stream count):
1. Episodes are permuted by (seed, epoch) and divided into C canonical streams (plan/partition.py).
2. Each stream interleaves a pool of up to `pool_size` live pieces (StreamOptions), each spread evenly (with random
   jitter) over the whole stream so that all end together (plan/schedule.py); each piece is read forward, its rows
   read when it goes live and its frames decoded in small batches and kept only while a later sample needs them
   (frame_reader.py, piece_reader.py).
3. Consumer k of K = world_size x num_workers owns streams k, k+K, ... (segments, plan/segments.py) and reads them
   by level fill (epoch_iterator.py); worker w of every rank emits the same number of samples (pad by repeating,
   or drop, see StreamOptions' `uneven`), so ranks get equal batch counts; a single rank emits every sample once.
4. A resume state holds, per segment, the position reached. The same layout continues exactly; any other layout
   re-cuts what remains of the epoch among its consumers: no sample repeated or skipped.

Steps 1, 3 and 4 are pure functions (plan/epoch.py); the batching strategy chosen at construction
(datasets/batching.py: random, or per_stream/stratified in datasets/lanes.py) picks which of them apply. This class
holds the options, opens the sources, checks a loaded state's identity and starts each consumer's pass.

Construction reads the metadata only (info, the locating columns of the episode table, tasks): nothing of data/ or
videos/, so start-up and memory do not grow with the dataset; every process plans only from the episode lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from robostream.datasets.batch_assembly import Allocate
from robostream.datasets.batching import make_batching
from robostream.datasets.cameras import CameraReader
from robostream.datasets.epoch_iterator import EpochIterator
from robostream.datasets.frame_reader import FrameReader
from robostream.datasets.lanes import LaneIterator
from robostream.datasets.mixture import (
    DEFAULT_SAMPLING_METHOD,
    Mixture,
    SourceReader,
    mixture_fingerprint,
    mixture_schema,
    mixture_sources,
    open_readers,
    selection_fingerprint,
)
from robostream.datasets.mixture_schema import MixtureBatches
from robostream.datasets.ranks import resolve_rank_world
from robostream.datasets.reading import STREAMING_DECODERS, Reading, ReadingSettings
from robostream.datasets.stream_options import StreamOptions
from robostream.format.depth import DEFAULT_DEPTH_UNIT, DepthUnit
from robostream.format.metadata import DatasetMetadata
from robostream.numbers import finite_number
from robostream.plan.epoch import EpochPlan, EpochSpec, LanePlan
from robostream.plan.layout import Consumer, auto_canonical_streams
from robostream.plan.mixture import DEFAULT_BATCHING, EpochUnits, check_epoch_units, epoch_units, samples_per_source
from robostream.plan.order import DEFAULT_SEED
from robostream.plan.state import CHECKSUM, check_checksum, check_state_head, state_checksum
from robostream.storage.options import ReadOptions
from robostream.storage.redact import redact_url
from robostream.video.options import DecodeOptions

STATE_VERSION = 3  # 3: per_stream and stratified states share one shape (an allocation of lane quotas)
# The constructor's defaults, published so that the benchmark and the training command default to them by name
# (those of its option groups beside each group: Mixture, StreamOptions, DecodeOptions).
DEFAULT_TOLERANCE_S = 1e-4


class StreamingLeRobotDataset(IterableDataset):
    """Iterable, resumable, rank- and worker-aware reader of a LeRobot v3.0 dataset, or of a weighted mixture of
    several (same samples as map-style; a mixture's samples also carry `dataset_index`)."""

    def __init__(
        self,
        repo_id: str | None = None,
        *,
        root: str | Path | None = None,
        revision: str | None = None,
        episodes: Sequence[int] | None = None,
        mixture: Mixture | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        shuffle: bool = True,
        seed: int = DEFAULT_SEED,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        return_uint8: bool = False,
        depth_output_unit: DepthUnit = DEFAULT_DEPTH_UNIT,
        video_backend: Literal["torchcodec", "pyav"] | None = None,
        decoding: DecodeOptions | None = None,
        streams: StreamOptions | None = None,
        read_options: ReadOptions | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        """
        Args:
            repo_id: a Hub dataset ("owner/name"): lerobot's local copy when there is one, else read from the Hub.
            root: a local folder or URL (hf://, s3://, http(s)://, file://) of the dataset; wins over repo_id.
            revision: the Hub revision of repo_id, pinned to its commit at construction.
            episodes: episode indices to read (default all).
            mixture: several datasets instead of one (then no repo_id/root/revision/episodes), with how an epoch
                and its batches draw from them; see Mixture. Samples carry `dataset_index` (int64, 0-d).
            delta_timestamps: per key, offsets in seconds (multiples of 1/fps) of a window around each frame (a
                mixture: common key names, resolved with each source's own fps).
            tolerance_s: how far a decoded frame's timestamp may be from the asked one before it is an error.
            shuffle: a random order per (seed, epoch); False reads episodes chronologically.
            seed: the order is a pure function of (seed, epoch, canonical streams).
            image_transforms: applied to every camera tensor.
            return_uint8: keep cameras uint8 (4x less memory and transport than float32).
            depth_output_unit: depth cameras (lerobot's `is_depth_map` video features) come as float32 (1, H, W)
                depths in "mm" (lerobot's default) or "m", and each source's `meta.stats` of them in the same unit.
            video_backend: "torchcodec" (default) or "pyav".
            decoding: where videos are decoded and how many decoders stay open (default DecodeOptions()).
            streams: how an epoch is cut into streams and each piece read: pool size, canonical streams, uneven
                ranks, partition, decode-ahead, prefetch (default StreamOptions()).
            read_options: how bytes are read (remote options, disk cache, read buffer); see ReadOptions. A
                mixture's default for sources without their own `read_options`.
            rank, world_size: this process's rank (default: torch.distributed, else RANK/WORLD_SIZE, else 0 of 1).
        """
        finite_number(seed, what="seed", integer=True, minimum=0)
        if (rank is None) != (world_size is None):
            raise ValueError("pass both rank= and world_size=, or neither (then they are resolved automatically)")
        decoding = decoding or DecodeOptions()
        self.streams = streams or StreamOptions()
        self.mixture = mixture
        self.is_mixture = mixture is not None
        self.batching = (
            make_batching(mixture.batching, batch_size=mixture.batch_size)
            if mixture is not None
            else make_batching(DEFAULT_BATCHING, batch_size=None)
        )
        specs = mixture_sources(repo_id=repo_id, root=root, revision=revision, episodes=episodes, mixture=mixture)
        self.shuffle, self.seed = shuffle, seed
        # A loaded resume state sets it (the stream count an epoch was started with).
        self.canonical_streams = self.streams.canonical_streams
        self._rank_world = (rank, world_size) if rank is not None and world_size is not None else None
        self.delta_timestamps = dict(delta_timestamps or {})
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
            decode_ahead=self.streams.decode_ahead,
            prefetch=self.streams.prefetch_pieces > 0,
            shuffle=shuffle,
        )
        # One reading for every source (a plain dataset is a mixture of one): the same decoders, pools, counters.
        self.reading = Reading(settings, decoders_kept=decoding.decoders_kept or STREAMING_DECODERS)
        self.sources = open_readers(specs, self.reading, lenient_windows=self.is_mixture)
        weights = [spec.weight for spec in specs]
        epoch_size = mixture.epoch_size if mixture is not None else None
        self.samples_per_source = samples_per_source([int(r.lengths.sum()) for r in self.sources], weights, epoch_size)
        check_epoch_units(self.samples_per_source, [r.lengths for r in self.sources], weights, epoch_size)
        self.schema = self.batches_of_mixture = None
        self.fingerprint = None
        self.dataset_fingerprint = None if self.is_mixture else selection_fingerprint(self._only())
        if mixture is not None:
            self.schema = mixture_schema(
                self.sources, self.delta_timestamps, self.batching.schema_mode(mixture.features), return_uint8
            )
            if image_transforms is None:
                self.batches_of_mixture = MixtureBatches(
                    self.schema, [r.frames.batch_assembler for r in self.sources], [r.rename for r in self.sources]
                )
            self.fingerprint = mixture_fingerprint(self.sources, weights, self.samples_per_source, mixture)
        self.epoch = 0
        self._resume: dict[str, Any] | None = None  # where the next pass continues from (a checked state)
        self._iterator: EpochIterator | LaneIterator | None = None  # this process's current pass

    # -- one dataset (not a mixture) ---------------------------------------------------------------------------
    def _only(self) -> SourceReader:
        if self.is_mixture:
            raise AttributeError(
                "a mixture has one metadata, episode selection and decoder set per source: use "
                "dataset.sources[i].meta / .episodes / .cameras / .frames"
            )
        (source,) = self.sources
        return source

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
    def frames(self) -> FrameReader:
        """How samples and batches are read from the dataset's files (one dataset)."""
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
        return epoch_units(
            [r.lengths for r in self.sources],
            self.samples_per_source,
            seed=self.seed,
            epoch=self.epoch,
            sampling_method=self.mixture.sampling_method if self.mixture is not None else DEFAULT_SAMPLING_METHOD,
        )

    def epoch_spec(self, consumers: int) -> EpochSpec:
        """This epoch's input to the pure planner (plan/epoch.py) for a layout of `consumers` roles."""
        units = self.epoch_units()
        files = None
        if self.streams.partition == "files":
            files = []
            for s, position in zip(units.source.tolist(), units.episode.tolist()):
                meta, episode = self.sources[s].meta, self.sources[s].episodes[position]
                files.append(
                    [(s, meta.data_file(episode))] + [(s, meta.video_file(episode, k)) for k in meta.video_keys]
                )
        return EpochSpec(
            units,
            self.resolved_canonical_streams(consumers),
            self.seed,
            self.epoch,
            self.shuffle,
            self.streams.uneven,
            self.streams.partition,
            files,
        )

    def epoch_plan(self, world_size: int, num_workers: int) -> EpochPlan | LanePlan:
        """What every consumer role reads in the coming pass on this layout (a LanePlan under per_stream and
        stratified)."""
        spec = self.epoch_spec(world_size * num_workers)
        return self.batching.plan(spec, len(self.sources), world_size, num_workers, self._resume)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration produces (clears a resume state of another epoch)."""
        finite_number(epoch, what="epoch", integer=True, minimum=0)
        if epoch != self.epoch:
            self._resume = None
        self.epoch = epoch

    # -- resume ----------------------------------------------------------------------------------------------
    def state_dict(self, *, batches: int | None = None, batch_size: int = 1, num_workers: int = 1) -> dict[str, Any]:
        """A small JSON-serialisable state: each segment's position plus what the layout still owes.

        Args:
            batches: batches the training loop consumed on each rank in this pass (StreamingDataLoader passes it);
                None describes in-process iteration (no DataLoader, this process's own count).
            batch_size: the loader's batch size.
            num_workers: the loader's workers (1 without workers).
        """
        _, world = self._rank_world or resolve_rank_world()
        identity = (
            {"mixture": self.fingerprint}
            if self.is_mixture
            else {"num_episodes": len(self.episodes), "dataset": self.dataset_fingerprint}
        )
        head = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            **identity,
            "canonical_streams": self.resolved_canonical_streams(world * num_workers),
            "layout": [world, num_workers],
        }
        progress = self.batching.state(
            self.epoch_plan(world, num_workers),
            world,
            num_workers,
            batches,
            batch_size,
            self._iterator,
            interleaved=self.shuffle,
        )
        state = {**head, **progress}
        return {**state, CHECKSUM: state_checksum(state)}

    def load_state_dict(
        self, state: Mapping[str, Any], *, on_mixture_change: Literal["error", "next_epoch"] = "error"
    ) -> None:
        """Continue from `state` at the next iteration, on this layout or any other.

        Args:
            state: a `state_dict()`.
            on_mixture_change: a state made with another mixture (other sources or revisions, selections,
                weights, epoch size, sampling or feature mode) cannot continue its epoch: "error" refuses it,
                "next_epoch" starts this mixture at the epoch after the state's.
        """
        if not isinstance(state, Mapping):
            raise ValueError(
                f"resume state: expected a state_dict() (a mapping), got {type(state).__name__} {state!r:.80}"
            )
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"resume state version {state.get('version')!r}; this robostream reads version {STATE_VERSION}, "
                "and a state of another version cannot continue its epoch here: start the epoch again "
                "(set_epoch(epoch) without load_state_dict)"
            )
        if on_mixture_change not in ("error", "next_epoch"):
            raise ValueError(f"on_mixture_change={on_mixture_change!r}: expected 'error' or 'next_epoch'")
        check_state_head(state, lanes=self.batching.lanes)
        check_checksum(state, where="resume state")
        if state.get("mixture") != self.fingerprint:
            if on_mixture_change == "next_epoch" and self.is_mixture and "mixture" in state:
                self.set_epoch(int(state["epoch"]) + 1)
                self._resume = None
                return
            raise ValueError(
                f"resume state was made with {_identity(state.get('mixture'))} but this dataset is "
                f"{_identity(self.fingerprint)}: its epoch cannot continue with other sources, revisions, episodes, "
                "weights, epoch_size, sampling_method, features, batching or batch_size; pass "
                "on_mixture_change='next_epoch' to apply this mixture from the next epoch, or rebuild the mixture "
                "the state was made with"
            )
        if not self.is_mixture:
            self._check_dataset_identity(state)
        for key in ("seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"resume state has {key}={state[key]!r} but this dataset has "
                    f"{key}={getattr(self, key)!r}; a stream only resumes with the same seed and shuffle"
                )
        if state.get("batching", "random") != self.batching.name:
            raise ValueError(
                f"resume state was made with batching={state.get('batching', 'random')!r}, this "
                f"dataset uses batching={self.batching.name!r}"
            )
        # The state's epoch and stream count shape the plan it is checked against: set them only once it holds.
        before = self.epoch, self.canonical_streams
        self.epoch, self.canonical_streams = int(state["epoch"]), int(state["canonical_streams"])
        try:
            spec = self.epoch_spec(state["layout"][0] * state["layout"][1])
            self._resume = self.batching.checked(state, spec, [r.label for r in self.sources])
        except BaseException:
            self.epoch, self.canonical_streams = before
            raise

    def _check_dataset_identity(self, state: Mapping[str, Any]) -> None:
        """One dataset: the state must come from the same episode selection (ids and lengths)."""
        if state.get("dataset") != self.dataset_fingerprint:
            raise ValueError(
                f"resume state was made with another dataset or episode selection ('dataset' fingerprint "
                f"{state.get('dataset')!r}; this one, {len(self.episodes)} episodes of {redact_url(self.meta.root)}, "
                f"is {self.dataset_fingerprint!r}): its epoch would skip or repeat samples here. Resume with the "
                "dataset and episodes= it was saved with, or start a new epoch without the state"
            )

    # -- iteration -------------------------------------------------------------------------------------------
    def _start_pass(self) -> EpochIterator | LaneIterator:
        """This consumer's pass over the coming plan (kept for the in-process state)."""
        consumer = self.consumer()
        plan = self.epoch_plan(consumer.world_size, consumer.num_workers)
        # After a same-layout resume, worker j plays the role of the worker whose batch comes next.
        worker_role = (consumer.worker + plan.rotation) % consumer.num_workers
        role = consumer.rank * consumer.num_workers + worker_role

        def pass_over(lane: EpochPlan, share: float = 1.0) -> EpochIterator:
            """This role's pass over a plan; `share`: the part of pool_size it keeps live (a lane of a stratified
            mixture, read at its source's share of the batches)."""
            return EpochIterator(
                lane,
                role=role,
                worker=consumer.worker,
                sources=self.sources,
                schema=self.schema,
                mixture_batches=self.batches_of_mixture,
                reading=self.reading,
                seed=self.seed,
                epoch=self.epoch,
                pool_size=max(1, round(self.streams.pool_size * share)),
                prefetch_pieces=self.streams.prefetch_pieces,
            )

        self._iterator = self.batching.iterator(plan, worker_role, pass_over)
        return self._iterator

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._start_pass())

    def batches(self, *, batch_size: int, drop_last: bool, allocate: Allocate) -> Iterator[dict[str, Any]]:
        """This consumer's samples as whole batches (what a StreamingDataLoader's workers yield): exactly torch's
        collate of the samples iteration gives, assembled in place.

        Args:
            batch_size: samples per batch (a worker's last batch may be short).
            drop_last: drop a short last batch.
            allocate: gives the tensors of a batch for its specs (fresh or reused shared memory).
        """
        if not self.assembles_batches:
            raise ValueError("this dataset has image_transforms, which run per sample: batch it with a collate")
        self.batching.check_loader(drop_last=drop_last, assembled=True)
        return self._start_pass().batches(self.batching.loader_batch_size(batch_size), drop_last, allocate)

    @property
    def assembles_batches(self) -> bool:
        """Whether a loader can have whole batches assembled here (not with image_transforms, which run per
        sample)."""
        return self.reading.settings.image_transforms is None

    def source_stats(self, index: int = 0) -> dict[str, dict[str, np.ndarray]]:
        """Normalisation statistics (meta/stats.json) of source `index` (of the dataset itself when it is not a
        mixture), under the mixture's common key names."""
        return self.sources[index].stats

    def frame_counts(self) -> dict[str, int]:
        """Frames decoded and delivered over this process and its DataLoader workers, the peak decoded-frame
        working set (of one live piece, of all live pieces of a worker, the most pieces live at once), and for
        remote data the bytes read, the time readers waited for them (us) and the peak bytes of fetched blocks
        held by a worker; of cameras asked on a GPU, the frames decoded there (`frames_decoded_gpu`) and on the CPU
        where it cannot decode them (`frames_decoded_cpu_fallback`)."""
        return self.reading.counters.totals()

    def camera_decoders(self) -> dict[str, str]:
        """Where each camera is decoded: "cpu", "cuda:N", or "cpu (GPU fallback: why)" (opens each camera's first
        file in this process); a mixture's cameras are keyed "source N (label): camera" (N: its place in the mixture)."""
        if not self.is_mixture:
            return self.sources[0].cameras.camera_decoders()
        return {
            f"source {source.index} ({source.label}): {key}": where
            for source in self.sources
            for key, where in source.cameras.camera_decoders().items()
        }


def _identity(fingerprint: str | None) -> str:
    return "one dataset (no mixture)" if fingerprint is None else f"the mixture {fingerprint}"
