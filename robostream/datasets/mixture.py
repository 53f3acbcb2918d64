"""Sources of a mixture: where each dataset comes from, how much of it an epoch takes, and under which names.

`Source` is what a user writes (MosaicML's `Stream` is the model) and `Mixture` the sources together with how an
epoch and its batches draw from them; `SourceReader` is what the streaming dataset builds from a source in every
process: the metadata, the episode selection, the decoders and the frame source. The
mixture's fingerprint names what a resume state depends on (sources pinned to their revision, selections,
weights, epoch size, sampling), so a state made with another mixture is refused rather than silently misread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robostream.collector import collector_paused
from robostream.datasets.cameras import CameraReader
from robostream.datasets.frame_reader import FrameReader
from robostream.datasets.mixture_schema import FeatureMode, MixtureSchema, SchemaMode, source_specs
from robostream.datasets.origin import open_dataset, resolve_episodes
from robostream.datasets.reading import Reading
from robostream.datasets.sample import SampleAssembler
from robostream.format.metadata import DatasetMetadata
from robostream.numbers import finite_number
from robostream.plan.mixture import DEFAULT_BATCHING, BatchingMethod, SamplingMethod, Weight
from robostream.plan.windows import delta_offsets, window_seconds
from robostream.storage.options import ReadOptions, read_options_from
from robostream.storage.redact import redact_url

# The defaults, published so that the benchmark and the training command default to them by name.
DEFAULT_SAMPLING_METHOD: SamplingMethod = "balanced"
DEFAULT_FEATURES: FeatureMode = "strict"


@dataclass(frozen=True, kw_only=True)
class Source:
    """One dataset of a mixture, and how much of it an epoch takes.

    Args:
        repo_id: a Hub dataset ("owner/name"): lerobot's local copy when there is one, else read from the Hub.
        root: a local folder or URL (hf://, s3://, http(s)://, file://); wins over repo_id.
        revision: the Hub revision of repo_id, pinned to its commit at construction.
        read_options: how its bytes are read (data_files_root, storage_options, disk cache, read buffer): a
            ReadOptions or a mapping of its fields (a mixture file's); default the dataset's `read_options`.
        episodes: episode indices to read (default all).
        delta_timestamps: this source's windows (default the dataset's); seconds, resolved with its own fps.
        proportion: relative weight: its share of `epoch_size` (all sources then need one).
        repeat: absolute weight: this many times its size per epoch (1.5: every sample once, half of them twice).
        choose: absolute weight: this many samples per epoch.
        feature_map: renames its features to the mixture's common names (e.g. {"observation.images.cam_high":
            "observation.images.top"}); the locating columns (index, episode_index, ...) keep their names.
        name: how errors and the benchmark call it (default: repo_id or root).
    """

    repo_id: str | None = None
    root: str | Path | None = None
    revision: str | None = None
    read_options: ReadOptions | None = None
    episodes: Sequence[int] | None = None
    delta_timestamps: Mapping[str, Sequence[float]] | None = None
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None
    feature_map: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None

    def __post_init__(self) -> None:
        if self.root is None and self.repo_id is None:
            raise ValueError("Source needs root= (a local folder or URL) or repo_id=")
        object.__setattr__(
            self, "read_options", read_options_from(self.read_options, where=f"source {self.label}: read_options")
        )
        self.weight  # fails now, naming the bad weight

    @property
    def weight(self) -> Weight:
        return Weight(self.proportion, self.repeat, self.choose)

    @property
    def label(self) -> str:
        return self.name or str(self.root if self.root is not None else self.repo_id)


@dataclass(frozen=True, kw_only=True)
class Mixture:
    """Several datasets read as one (the streaming dataset's `mixture=`): an epoch takes exactly its per-source
    counts (full passes plus one partial pass without repeats, whole episodes where it can), shuffled together;
    samples carry `dataset_index` (int64, 0-d).

    Args:
        sources: the datasets, in order (their position is `dataset_index`): each names a dataset, its weight
            (proportion, repeat or choose), episodes, windows and feature_map.
        epoch_size: samples per epoch when the sources are weighted by proportion (default: the sources' total).
        sampling_method: the partial passes: "balanced" (a new subset every epoch) or "fixed" (the same).
        features: "strict" (sources must have the same keys, dtypes and shapes after their feature_map) or "union"
            (a key a source lacks is zeros there, with `<key>_is_pad` True).
        batching: how the sources share batches: "random" (samples of all sources shuffled together: the mixture
            holds in expectation in every batch) or "per_stream" (every global batch, i.e. the batches of all
            ranks at one step, from one source, in a random order of sources; sources may then differ in keys and
            shapes) or "stratified" (every batch holds each source's share of it: floor or ceil of batch_size x
            its share of the epoch, the epoch's counts exact). per_stream and stratified need batch_size, and plan
            each source apart: a consumer keeps live pieces of every source, so memory grows with the number of
            sources.
        batch_size: the loader's batch size, needed to plan batching="per_stream" or "stratified".
    """

    sources: Sequence[Source]
    epoch_size: int | None = None
    sampling_method: SamplingMethod = DEFAULT_SAMPLING_METHOD
    features: FeatureMode = DEFAULT_FEATURES
    batching: BatchingMethod = DEFAULT_BATCHING
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sources, (str, Mapping)) or not isinstance(self.sources, Sequence) or not self.sources:
            raise ValueError(f"sources={self.sources!r:.80}: expected a non-empty list of Source")
        for i, source in enumerate(self.sources):
            if not isinstance(source, Source):
                raise ValueError(f"sources[{i}] is {source!r:.80}: expected a robostream.Source")
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.epoch_size is not None:
            finite_number(self.epoch_size, what="epoch_size", integer=True, minimum=1)
        if self.sampling_method not in ("balanced", "fixed"):
            raise ValueError(f"sampling_method={self.sampling_method!r}: expected 'balanced' or 'fixed'")
        if self.features not in ("strict", "union"):
            raise ValueError(f"features={self.features!r}: expected 'strict' (same keys everywhere) or 'union'")
        self._check_batching()

    def _check_batching(self) -> None:
        if self.batching == "random":
            if self.batch_size is not None:
                raise ValueError(
                    f"batch_size={self.batch_size!r} plans batching='per_stream' or 'stratified'; with "
                    "batching='random' the loader's batch_size applies"
                )
            return
        if self.batching not in ("per_stream", "stratified"):
            raise ValueError(f"batching={self.batching!r}: expected 'random', 'per_stream' or 'stratified'")
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"batching={self.batching!r} needs batch_size= (the loader's), got {size!r}")
        if self.batching == "per_stream" and self.features != "strict":
            raise ValueError(
                "batching='per_stream' never mixes sources in a batch, so each keeps its own keys: "
                f"features={self.features!r} applies to batching='random'"
            )


@dataclass
class SourceReader:
    """A source opened in this process: what the streaming dataset reads it with."""

    index: int
    label: str
    meta: DatasetMetadata
    episodes: list[int]  # selected episode indices, sorted
    lengths: np.ndarray  # samples of each selected episode
    cameras: CameraReader
    frames: FrameReader
    rename: dict[str, str]  # feature_map
    delta_timestamps: dict[str, list[float]]  # in its own key names

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Its normalisation statistics (meta/stats.json) under the mixture's common names."""
        return {self.rename.get(k, k): v for k, v in self.meta.stats.items()}


def selection_fingerprint(reader: SourceReader) -> str:
    """A short hash of what one dataset's epochs depend on: its selected episodes and their lengths (not its
    location: a dataset moved to another path or node resumes)."""
    episodes = np.asarray(reader.episodes, dtype=np.int64)
    return hashlib.sha256(episodes.tobytes() + reader.lengths.astype(np.int64).tobytes()).hexdigest()[:24]


def mixture_fingerprint(
    sources: Sequence[SourceReader],
    weights: Sequence[Weight],
    counts: Sequence[int],
    mixture: Mixture,
) -> str:
    """A short hash of everything a mixture's epochs depend on: roots (Hub roots carry their commit), selected
    episodes and their lengths, weights, per-source counts, epoch size, sampling, feature mode and batching. A
    root's user and password are left out: a rotated password resumes the same mixture."""
    doc: list[Any] = [
        mixture.epoch_size,
        mixture.sampling_method,
        mixture.features,
        mixture.batching,
        mixture.batch_size,
    ]
    for reader, weight, count in zip(sources, weights, counts):
        episodes = np.asarray(reader.episodes, dtype=np.int64)
        selection = hashlib.sha256(episodes.tobytes() + reader.lengths.astype(np.int64).tobytes()).hexdigest()[:16]
        doc.append(
            [
                redact_url(reader.meta.root),
                selection,
                [weight.proportion, weight.repeat, weight.choose],
                int(count),
                sorted(reader.rename.items()),
            ]
        )
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def open_reader(index: int, spec: Source, reading: Reading, *, lenient_windows: bool) -> SourceReader:
    """Open one source: metadata, episode selection, its windows at its own fps, its cameras and frame reader.

    Args:
        index: the source's position in the mixture.
        spec: the source.
        reading: the dataset's reading (its settings and the resources every source shares).
        lenient_windows: skip windows of common keys the source lacks (a mixture: its schema reports them).
    """
    settings = reading.settings
    meta = open_dataset(
        spec.repo_id,
        spec.root,
        spec.revision,
        spec.read_options or settings.read_options,
        settings.video_backend,
        "StreamingLeRobotDataset",
        shared_reading=reading.shared_reading,
        depth_output_unit=settings.depth_output_unit,
    )
    episodes = resolve_episodes(meta, spec.episodes)
    common = spec.delta_timestamps if spec.delta_timestamps is not None else settings.delta_timestamps
    source_key = {c: k for k, c in spec.feature_map.items()}
    deltas = {source_key.get(key, key): values for key, values in window_seconds(common).items()}
    if lenient_windows:  # keep the windows of the common names this source has (under its own names)
        deltas = {k: v for k, v in deltas.items() if k in meta.info.features and spec.feature_map.get(k, k) in common}
    offsets = delta_offsets(deltas, meta.fps, settings.tolerance_s, list(meta.info.features)) if deltas else {}
    cameras = CameraReader(meta, reading)
    assembler = SampleAssembler(meta, offsets, settings.return_uint8, settings.image_transforms)
    frames = FrameReader(meta, assembler=assembler, cameras=cameras, index=index, reading=reading)
    return SourceReader(
        index,
        spec.label,
        meta,
        episodes,
        meta.episodes.lengths_of(episodes),
        cameras,
        frames,
        dict(spec.feature_map),
        deltas,
    )


SOURCES_OPENED_AT_ONCE = 32  # a plain-HTTP source asks its ~5 requests at once: 32 at once open 500 in ~16 rounds


def open_readers(specs: Sequence[Source], reading: Reading, *, lenient_windows: bool) -> list[SourceReader]:
    """Open every source, up to SOURCES_OPENED_AT_ONCE at a time (threads: opening waits on the store, and on
    parquet and numpy, which release the GIL). The first source that fails (in mixture order) fails construction,
    its error noting the source: dropping it would change the mixture's counts, and a source failing on one node
    only would give the nodes different epochs.

    Args:
        specs: the sources, in mixture order.
        reading: the dataset's reading.
        lenient_windows: skip windows of common keys a source lacks (a mixture: its schema reports them).
    """
    # Each source's metadata is thousands of objects, all kept: collector passes meanwhile free nothing (a full one,
    # ~0.2 s with torch imported, landed in every third construction of 100 sources).
    with collector_paused():
        readers = _opened(specs, reading, lenient_windows=lenient_windows)
    for reader in readers:  # in mixture order, whatever order the threads finished in
        reading.add_storage(reader.meta.data_storage)
    return readers


def _opened(specs: Sequence[Source], reading: Reading, *, lenient_windows: bool) -> list[SourceReader]:
    if len(specs) == 1:
        return [open_reader(0, specs[0], reading, lenient_windows=lenient_windows)]
    pool = ThreadPoolExecutor(min(len(specs), SOURCES_OPENED_AT_ONCE), thread_name_prefix="robostream-open")
    try:
        futures = [
            pool.submit(open_reader, i, spec, reading, lenient_windows=lenient_windows) for i, spec in enumerate(specs)
        ]
        readers = []
        for i, (spec, future) in enumerate(zip(specs, futures)):
            try:
                readers.append(future.result())
            except BaseException as exc:
                exc.add_note(f"(while opening source {i} of the mixture, {spec.label!r})")
                raise
        return readers
    finally:
        # No thread may outlive construction: DataLoader workers fork from this process.
        pool.shutdown(wait=True, cancel_futures=True)


def mixture_sources(
    *,
    repo_id: str | None,
    root: str | Path | None,
    revision: str | None,
    episodes: Sequence[int] | None,
    mixture: Mixture | None,
) -> list[Source]:
    """The sources a streaming dataset reads: the mixture's, or its one dataset as a single Source (errors name
    the arguments that do not go together)."""
    if mixture is not None:
        given = [
            n
            for n, v in (("repo_id", repo_id), ("root", root), ("revision", revision), ("episodes", episodes))
            if v is not None
        ]
        if given:
            raise ValueError(f"mixture= names its datasets: pass no {given} (each Source has its own)")
        return list(mixture.sources)
    if root is None and repo_id is None:
        raise ValueError("StreamingLeRobotDataset needs root= (a local folder or URL), repo_id= or mixture=")
    return [Source(repo_id=repo_id, root=root, revision=revision, episodes=episodes)]


def mixture_schema(
    sources: Sequence[SourceReader],
    delta_timestamps: Mapping[str, Sequence[float]],
    features: SchemaMode,
    return_uint8: bool,
) -> MixtureSchema:
    """The mixture's common keys, checked across its sources (errors name the key and the sources)."""
    specs = []
    for reader in sources:
        windows = {reader.rename.get(k, k): len(v) for k, v in reader.delta_timestamps.items()}
        specs.append(source_specs(reader.meta, reader.rename, windows, reader.label))
    known = {k for spec in specs for k in spec}
    unknown = [k for k in delta_timestamps if k not in known]
    if unknown:
        raise ValueError(
            f"delta_timestamps keys {unknown} are features of no source; the mixture's keys: {sorted(known)}"
        )
    return MixtureSchema(
        [r.meta for r in sources],
        specs,
        [r.rename for r in sources],
        [r.label for r in sources],
        features,
        return_uint8,
    )
