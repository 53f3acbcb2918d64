"""A dataset's metadata as one object: info.json + episodes table + tasks + stats, and the file each episode uses.

Metadata is read from `root` (a local folder or an fsspec URL) once per process; data and video files may live
elsewhere (`data_files_root`, e.g. a storage bucket beside a Hub repo holding the metadata).
"""

from __future__ import annotations

import copy
import io
import json
import re
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from robostream.errors import (
    DatasetFormatError,
    MissingFileError,
    UnsupportedVersionError,
)
from robostream.format.depth import DEFAULT_DEPTH_UNIT, DepthCoding, DepthUnit, check_depth_unit, rescale_depth_stats
from robostream.format.episodes import EpisodeTable, episode_table, read_episode_part
from robostream.format.info import CONVERT_HINT, DatasetInfo, chunks_size_of, loads_info
from robostream.format.language import SAY_TOOL_SCHEMA
from robostream.format.metadata_snapshot import (
    SNAPSHOT_KEY,
    MetadataTables,
    load_tables,
    revision_token,
    save_tables,
    snapshot_identity,
)
from robostream.format.paths import DEFAULT_EPISODES_PATH, render_template
from robostream.format.stats import stats_from_json
from robostream.format.tasks import read_tasks
from robostream.memory import release_freed_memory
from robostream.storage.derived import DerivedCache
from robostream.storage.integrity import FileVersion
from robostream.storage.options import ReadOptions
from robostream.storage.redact import redact_url
from robostream.storage.store import SharedReading, Storage

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODE_FILE = re.compile(r"meta/episodes/chunk-[^/]+/file-[^/]+\.parquet")


@dataclass(frozen=True)
class DatasetMetadata:
    """Everything about a dataset except the frames themselves."""

    storage: Storage  # where the metadata came from
    data_storage: Storage  # where data and video files are read from
    info: DatasetInfo
    episodes: EpisodeTable
    tasks: dict[int, str]
    # meta/stats.json as parsed, in the units it records: shared by every dataset of the process read from the same
    # snapshot, never written (`stats` is this dataset's own copy).
    recorded_stats: dict[str, dict[str, np.ndarray]]
    derived: DerivedCache  # the node-local folders derived from the tables (metadata snapshot, data columns)
    depth_unit: DepthUnit = DEFAULT_DEPTH_UNIT  # the unit of depth cameras' frames and of their stats (a reader's
    # choice, lerobot's `depth_output_unit`: the stats were rescaled to it from their recorded unit)

    @cached_property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json's statistics, depth cameras' in `depth_unit`: this dataset's own arrays (lerobot edits its
        metadata's stats), made at the first use: a policy reads them once, and a mixture of 300 sources held ~4 MiB
        of copies nothing read (BENCHMARKS.md, eleventh session)."""
        own = {
            key: {name: value.copy() for name, value in values.items()} for key, values in self.recorded_stats.items()
        }
        return rescale_depth_stats(own, self.info.depth_codings, self.depth_unit)

    @property
    def root(self) -> str:
        return self.storage.url

    @property
    def fps(self) -> int | float:
        return self.info.fps

    @cached_property
    def features(self) -> dict[str, dict[str, Any]]:
        """info.json's features (key -> dtype, shape, names, ...), shapes as tuples: exactly lerobot's
        `LeRobotDatasetMetadata.features`. With `fps`, `stats` and `camera_keys` this is what lerobot's `make_policy`
        and `resolve_delta_timestamps` read from their `ds_meta`."""
        return {key: {**spec, "shape": tuple(spec["shape"])} for key, spec in self.info.features.items()}

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

    @property
    def camera_keys(self) -> list[str]:
        return self.info.camera_keys

    @property
    def depth_codings(self) -> dict[str, DepthCoding]:
        """Depth cameras and their quantisation (format/depth.py)."""
        return self.info.depth_codings

    @property
    def depth_keys(self) -> list[str]:
        """Cameras that are depth maps: float32 (1, H, W) in `depth_unit` in samples (lerobot's `depth_keys`)."""
        return list(self.info.depth_codings)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """info.json's "tools" (function schemas a chat template is given with the language columns), else
        lerobot's default, the `say` tool: lerobot's `LeRobotDatasetMetadata.tools`, a fresh copy each time (a deep
        one: lerobot's shallow copy lets a caller edit its default schema for every later dataset)."""
        declared = self.info.raw.get("tools")
        if declared and not (isinstance(declared, list) and all(isinstance(tool, dict) for tool in declared)):
            raise DatasetFormatError(
                f"{self.describe(INFO_PATH)}: 'tools' must be a list of function "
                f"schemas (objects), got {declared!r}; fix or remove it"
            )
        return copy.deepcopy(declared or [SAY_TOOL_SCHEMA])

    def data_file(self, episode_index: int) -> str:
        """Relative path of the data parquet holding an episode."""
        row = self.episodes.row_of(episode_index)
        return render_template(
            self.info.data_path,
            what=f"data_path of episode {episode_index}",
            chunk_index=int(self.episodes.data_chunk[row]),
            file_index=int(self.episodes.data_file[row]),
            episode_chunk=int(self.episodes.data_chunk[row]),
            episode_index=episode_index,
        )

    def video_file(self, episode_index: int, video_key: str) -> str:
        """Relative path of the mp4 holding one camera of an episode."""
        if self.info.video_path is None:
            raise DatasetFormatError(
                f"{self.storage.describe(INFO_PATH)}: video_path is null but {video_key!r} is a video feature"
            )
        span = self.episodes.video_span(episode_index, video_key)
        return render_template(
            self.info.video_path,
            what=f"video_path of episode {episode_index} camera {video_key!r}",
            video_key=video_key,
            chunk_index=span.chunk_index,
            file_index=span.file_index,
            episode_chunk=span.chunk_index,
            episode_index=episode_index,
        )

    def open(self, relative: str, what: str, *, first_bytes: int = 0, last_bytes: int = 0):
        """A data or video file: a local path string, or a ranged remote reader (its first or last bytes asked for
        now when given: Storage.open)."""
        return self.data_storage.open(relative, what=what, first_bytes=first_bytes, last_bytes=last_bytes)

    def describe(self, relative: str) -> str:
        return self.data_storage.describe(relative)

    def local(self, relative: str, what: str) -> Path:
        """The local path of a data or video file (local datasets only)."""
        return self.data_storage.local_path(relative, what=what)

    def task(self, task_index: int) -> str:
        try:
            return self.tasks[int(task_index)]
        except KeyError:
            raise DatasetFormatError(
                f"{self.storage.describe(TASKS_PATH)}: task_index {task_index} is used by the data but not defined"
            ) from None


@dataclass(frozen=True)
class MetaFiles:
    """What finding the revision of meta/ learnt: every file's version (None: nothing was asked, a Hub root pinned to
    a commit) and the files read whole on the way, whose bytes serve the build of the snapshot."""

    versions: dict[str, FileVersion] | None
    fetched: dict[str, bytes]

    def read(self, storage: Storage, relative: str) -> bytes:
        """A meta file whole: the bytes already read, else one request (FileNotFoundError, without a request, for a
        file the versions lack)."""
        if relative in self.fetched:
            return self.fetched[relative]
        if self.versions is not None and relative not in self.versions:
            raise FileNotFoundError(storage.describe(relative))
        return storage.read_bytes(relative)


def read_info_text(storage: Storage, meta: MetaFiles) -> str:
    """meta/info.json's text (a missing file that the versions already lack costs no request)."""
    try:
        data = meta.read(storage, INFO_PATH)
    except FileNotFoundError as exc:
        raise info_missing_error(storage, meta, exc) from exc
    return info_text_of(storage, data)


def info_missing_error(storage: Storage, meta: MetaFiles, exc: FileNotFoundError) -> DatasetFormatError:
    """The error for a root without meta/info.json: a v2.x dataset (meta/episodes.jsonl: one request where the
    versions of meta/ are not known) or not a LeRobot dataset root (with the reason a filesystem gave)."""
    if (meta.versions is not None and "meta/episodes.jsonl" in meta.versions) or (
        meta.versions is None and storage.exists("meta/episodes.jsonl")
    ):
        return UnsupportedVersionError(
            f"{redact_url(storage.url)}: this is a v2.x dataset (meta/episodes.jsonl); {CONVERT_HINT}"
        )
    # A filesystem may explain a "not found" (e.g. the Hub: the revision in the URL does not exist).
    reason = next(
        (
            e
            for e in (exc.__cause__, exc.__cause__ and exc.__cause__.__cause__)
            if e is not None and not isinstance(e, FileNotFoundError)
        ),
        None,
    )
    detail = f" ({type(reason).__name__}: {reason})" if reason is not None else ""
    return DatasetFormatError(
        f"{storage.describe(INFO_PATH)}: not found{detail}; is {redact_url(storage.url)} a LeRobot dataset root "
        "(it should contain meta/info.json)?"
    )


def info_text_of(storage: Storage, data: bytes) -> str:
    """info.json's bytes as text (not UTF-8: an error naming the file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(
            f"{storage.describe(INFO_PATH)}: not UTF-8 text ({exc}); is it really a LeRobot info.json?"
        ) from exc


def episode_files(storage: Storage, meta: MetaFiles) -> list[str]:
    """The episode-metadata parquet files: those the versions of meta/ name, else a listing of their own."""
    if meta.versions is not None:
        return sorted(p for p in meta.versions if EPISODE_FILE.fullmatch(p))
    return storage.glob(f"{EPISODES_DIR}/chunk-*/file-*.parquet")


def read_tables(storage: Storage, meta: MetaFiles) -> MetadataTables:
    """Read the metadata files (every error names the file at fault); small files whole, in one request each (none
    for the files finding the revision read already)."""
    info_text = read_info_text(storage, meta)
    info = loads_info(info_text, storage.describe(INFO_PATH))
    files = episode_files(storage, meta)
    if not files:
        raise DatasetFormatError(f"{storage.describe(EPISODES_DIR)}: no chunk-*/file-*.parquet episode metadata found")
    parts = [
        (
            read_episode_part(
                io.BytesIO(meta.fetched[f]) if f in meta.fetched else storage.open(f),
                storage.describe(f),
                info.video_keys,
            ),
            storage.describe(f),
        )
        for f in files
    ]
    release_freed_memory()  # the parsed footers of the episode files (large, transient)
    try:
        tasks = read_tasks(io.BytesIO(meta.read(storage, TASKS_PATH)), storage.describe(TASKS_PATH))
    except FileNotFoundError as exc:
        raise MissingFileError(
            f"{storage.describe(TASKS_PATH)}: tasks file not found; a v3.0 dataset needs it"
        ) from exc
    try:
        stats_text = meta.read(storage, STATS_PATH).decode("utf-8")
    except FileNotFoundError:
        stats_text = None
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"{storage.describe(STATS_PATH)}: not UTF-8 JSON ({exc})") from exc
    return MetadataTables(info_text=info_text, episode_parts=parts, tasks=tasks, stats_text=stats_text)


def metadata_revision(storage: Storage) -> tuple[str, MetaFiles]:
    """What names the current revision of a dataset's metadata (see format/metadata_snapshot.py), and what finding
    it learnt about meta/. Every file the snapshot depends on is named by a version token, or by the sha256 of its
    bytes where nothing else names it (those bytes are read whole, once, and serve the build too)."""
    if storage.immutable:
        return "", MetaFiles(None, {})
    meta = MetaFiles(storage.list_versions("meta"), {}) if storage.can_list() else probe_meta(storage)
    assert meta.versions is not None
    for path, version in meta.versions.items():
        if not version.token and path not in meta.fetched:
            meta.fetched[path] = storage.read_bytes(path)
    return revision_token(meta.versions, meta.fetched), meta


def probe_meta(storage: Storage) -> MetaFiles:
    """meta/ where it cannot be listed (plain HTTP): info.json, tasks.parquet and stats.json read whole (a build
    reads them whole anyway; their bytes name them whatever headers the server sends), the episodes files found by
    probing in rollover order (file index up to chunks_size, then the next chunk), a HEAD each and one for the
    first missing. One round trip for a dataset with one episodes file: the small files and the first two episodes
    files are asked at once (Storage.probe), then as many files at once as were found so far (a dataset with n
    episodes files: about log2(n) round trips, and at most n HEADs past the first missing one, whose answers are
    not used)."""
    first = [_episodes_path(0, 2), _episodes_path(1, 2)]  # chunk-000's first two: the first two unless chunks_size=1
    probed = storage.probe(whole=(INFO_PATH, TASKS_PATH, STATS_PATH), heads=first, what="metadata file")
    if INFO_PATH in probed.missing:
        exc = probed.missing[INFO_PATH]
        raise info_missing_error(storage, MetaFiles(None, {}), exc) from exc
    info_text = info_text_of(storage, probed.whole[INFO_PATH])
    fetched = dict(probed.whole)
    versions = {path: FileVersion(len(data)) for path, data in fetched.items()}
    chunks_size = chunks_size_of(info_text, storage.describe(INFO_PATH))
    known = {path: probed.versions.get(path) for path in first}  # None: not found
    index = 0
    while True:
        relative = _episodes_path(index, chunks_size)
        if relative not in known:
            batch = [_episodes_path(i, chunks_size) for i in range(index, 2 * index)]
            more = storage.probe(whole=(), heads=batch, what="episodes file")
            known |= {path: more.versions.get(path) for path in batch}
        version = known[relative]
        if version is None:
            return MetaFiles(versions, fetched)
        versions[relative] = version
        index += 1


def _episodes_path(index: int, chunks_size: int) -> str:
    """The episodes file at `index` in rollover order (chunks_size files per chunk)."""
    return render_template(
        DEFAULT_EPISODES_PATH,
        what="episodes path",
        chunk_index=index // chunks_size,
        file_index=index % chunks_size,
    )


def load_metadata(
    root: str | Path,
    *,
    read_options: ReadOptions | None = None,
    shared: SharedReading | None = None,
    depth_unit: DepthUnit = DEFAULT_DEPTH_UNIT,
) -> DatasetMetadata:
    """Read a v3.0 dataset's metadata from a local folder or URL; every error names the file at fault.

    The tables are kept in the node's derived cache (`read_options.derived_cache()`; format/metadata_snapshot.py): a
    later construction on this node loads them after checking the revision (no request for a Hub commit, one
    listing where the store lists, a constant few over plain HTTP).

    Args:
        root: the dataset's folder or URL, where its metadata is read.
        read_options: how the bytes are read (default ReadOptions()): data and video files from its
            data_files_root, else beside the metadata; its disk cache keeps whole data and video files.
        shared: metadata, data and video files are read through the clients, blocks and read-ahead it shares with
            other datasets (a mixture's sources; see storage/store.py SharedReading).
        depth_unit: the unit depth cameras are read in, "m" or "mm"; their stats are rescaled to it.
    """
    depth_unit = check_depth_unit(depth_unit)
    options = read_options or ReadOptions()
    storage = Storage(root, options, shared=shared, cache_files=False)
    if storage.is_local and not Path(storage.root).is_dir():
        raise DatasetFormatError(f"{root}: dataset root does not exist or is not a directory")
    # storage.url: a Hub root pinned to the commit its revision named, so data and metadata come from the same one
    data_source = storage.url if options.data_files_root is None else options.data_files_root
    data_storage = Storage(data_source, options, shared=shared)
    derived = options.derived_cache()
    revision, meta = metadata_revision(storage)
    snapshot = derived.open(
        snapshot_identity(storage.describe("meta"), revision),
        lambda folder: save_tables(read_tables(storage, meta), folder),
        lambda folder: Snapshot(load_tables(folder)),
        keep_as=f"{SNAPSHOT_KEY}|{storage.describe('meta')}",
    )
    parsed = snapshot.parse(storage)  # outside the cache's load: a dataset's own error is not a damaged entry
    return DatasetMetadata(
        storage=storage,
        data_storage=data_storage,
        info=parsed.info,
        episodes=parsed.episodes,
        tasks=dict(parsed.tasks),  # the caller's own (lerobot edits its metadata's)
        recorded_stats=parsed.stats,
        derived=derived,
        depth_unit=depth_unit,
    )


@dataclass(frozen=True)
class ParsedTables:
    """A metadata snapshot's tables parsed and checked, shared by the datasets a process constructs from it."""

    info: DatasetInfo
    episodes: EpisodeTable  # its arrays are never written
    tasks: dict[int, str]  # copied into each DatasetMetadata
    stats: dict[str, dict[str, np.ndarray]]  # in their recorded units; each DatasetMetadata copies them when used


class Snapshot:
    """What a process loaded from a metadata snapshot: the node's derived cache keeps it for the process while the
    snapshot is current (`DerivedCache.open(keep_as=...)`, one per dataset location), so a dataset constructed
    again from an unchanged source parses nothing (no JSON, no checks)."""

    def __init__(self, tables: MetadataTables) -> None:
        self._tables: MetadataTables | None = tables  # dropped once parsed: the parsed tables are what is kept
        self._parsed: ParsedTables | None = None
        self._lock = threading.Lock()  # sources of one dataset may share a snapshot, and open in threads

    def parse(self, storage: Storage) -> ParsedTables:
        """The tables parsed and checked: the first call parses them (an error, the dataset's, is raised again by
        every later call), the later ones return the same object."""
        with self._lock:
            if self._parsed is None:
                assert self._tables is not None
                self._parsed = parse_tables(self._tables, storage)
                self._tables = None
            return self._parsed


def parse_tables(tables: MetadataTables, storage: Storage) -> ParsedTables:
    """The snapshot's info.json, episode table and stats parsed and checked (errors name the dataset's files)."""
    info = loads_info(tables.info_text, storage.describe(INFO_PATH))
    episodes = episode_table(tables.episode_parts, info.video_keys, info.fps, info.video_path)
    stats: dict[str, Any] = {}
    if tables.stats_text is not None:
        try:
            stats = stats_from_json(json.loads(tables.stats_text), storage.describe(STATS_PATH))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(
                f"{storage.describe(STATS_PATH)}: malformed JSON at line {exc.lineno}: {exc.msg}"
            ) from exc
    for values in stats.values():
        for value in values.values():
            value.flags.writeable = False  # shared by the snapshot's datasets, each using its own copy
    return ParsedTables(info=info, episodes=episodes, tasks=tables.tasks, stats=stats)
