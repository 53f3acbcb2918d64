"""The data rows of one episode at a time, read from its data parquet file by row group.

Nothing under data/ is read when a dataset is constructed. The first time a process needs an episode of a data
file it reads that file's footer (kept for the next `footers` files, least recently used dropped first), picks the
row groups whose `episode_index` statistics can hold the episode, reads only those (remote: only their byte
ranges) and checks that the rows are exactly the episode's [dataset_from_index, dataset_to_index) of the episode
table, in order. A file written without statistics costs a read of all its row groups per episode, never a wrong
row. Cost per episode: one row-group read (lerobot's recorder writes one row group per episode); memory: the
cached footers. This is the streaming path (each episode read once per pass, by the process that owns it; remote:
only its byte ranges); map-style random access reads rows by offset from derived column files instead
(data_columns.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError
from robostream.format.arrow_values import arrow_values, boolean_array
from robostream.format.info import DEFAULT_FEATURES
from robostream.format.language import check_language_column, language_keys
from robostream.format.metadata import DatasetMetadata
from robostream.process_local import ProcessLocal
from robostream.storage.cache import described
from robostream.storage.exact_ranges import merged
from robostream.storage.store import RangedReader

REPAIR_HINT = "the data file and meta/episodes disagree; re-convert or re-write the dataset"


@dataclass(frozen=True)
class EpisodeRows:
    """Every data column of one episode, row i = frame i of the episode."""

    episode: int
    columns: dict[str, np.ndarray]  # numeric features, (length, *shape)
    images: dict[str, pa.Array]  # image features: struct<bytes, path> per row
    strings: dict[str, list[str]]  # string features
    language: dict[str, pa.Array] = field(default_factory=dict)  # language columns, checked (format/language.py)

    def __len__(self) -> int:
        return len(self.columns["index"])


def to_numpy(column: pa.ChunkedArray | pa.Array, rows: int, dtype: pa.DataType | None = None) -> np.ndarray:
    """A numeric (possibly nested fixed-size list) Arrow column as a contiguous (rows, *shape) array; with `dtype`
    its values are cast to it first (safely: a value that does not fit, e.g. 1.5 as an integer, raises)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    shape: list[int] = []
    while pa.types.is_fixed_size_list(array.type) or pa.types.is_list(array.type):
        if array.null_count:  # flatten() would drop a null row and shift every later one
            raise ValueError(f"{array.null_count} null row(s)")
        if pa.types.is_fixed_size_list(array.type):
            shape.append(array.type.list_size)
        else:  # variable lists written by other tools: all rows must have one length
            lengths = arrow_values(pc.list_value_length(array))
            if len(lengths) and (lengths != lengths[0]).any():
                raise ValueError("ragged list column")
            shape.append(int(lengths[0]) if len(lengths) else 0)
        array = array.flatten()
    if dtype is not None and array.type != dtype:
        try:
            array = array.cast(dtype, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"its {array.type} values cannot be read as {dtype}: {exc}") from exc
    return arrow_values(array).reshape([rows, *shape])


def feature_column(table: pa.Table, key: str, feature: dict[str, Any], name: str) -> np.ndarray:
    """A numeric data column as info.json declares it, the way lerobot reads it (its table is cast to the declared
    features): values cast to the declared dtype (a float64 state becomes float32, an integral float64 `index`
    int64), the per-frame shape checked against the declared one (a [1] feature is a scalar per frame).
    Anything else is an error naming the file and the column, never a sample of another dtype or size."""
    try:
        dtype = pa.from_numpy_dtype(np.dtype(feature["dtype"]))
    except TypeError as exc:
        raise DatasetFormatError(
            f"{name}: info.json declares column {key!r} with dtype {feature['dtype']!r}, "
            "which is not a numeric dtype; fix meta/info.json"
        ) from exc
    try:
        values = to_numpy(table.column(key), table.num_rows, dtype)
    except ValueError as exc:
        raise DatasetFormatError(
            f"{name}: column {key!r} could not be read as {feature['dtype']} "
            f"{list(feature['shape'])} (as meta/info.json declares it): {exc}"
        ) from exc
    declared = tuple(feature["shape"])
    if values.shape[1:] != declared and not (declared == (1,) and values.ndim == 1):
        raise DatasetFormatError(
            f"{name}: column {key!r} holds {list(values.shape[1:]) or 'scalars'} per frame, but "
            f"meta/info.json declares shape {list(declared)}; {REPAIR_HINT}"
        )
    return values


def data_features(features: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """info.json's features, with the index columns every data file has (lerobot's own declarations) where
    info.json does not list them."""
    return {**{k: v for k, v in DEFAULT_FEATURES.items() if k not in features}, **features}


def check_episode_index(name: str, episode: int, index: np.ndarray, expected: tuple[int, int]) -> None:
    """The rows an episode has in a file (in file order) must carry exactly the indices [from, to), ascending."""
    lo, hi = expected
    if len(index) != hi - lo or (len(index) and (index[0] != lo or (np.diff(index) != 1).any())):
        found = f"index {int(index[0])}..{int(index[-1])}" if len(index) else "no index"
        order = "" if not len(index) or (np.diff(index) > 0).all() else ", out of order"
        raise DatasetFormatError(
            f"{name}: episode {episode} has {len(index)} rows with {found}{order}, but the "
            f"episode table says index [{lo}, {hi}); {REPAIR_HINT}"
        )


def language_columns(table: pa.Table, keys: list[str], name: str, episode: int) -> dict[str, pa.Array]:
    """One episode's language columns (its rows only, in frame order), each checked to be lists of structs."""
    columns = {}
    for key in keys:
        array = table.column(key).combine_chunks()
        check_language_column(array, key, f"{name}: episode {episode}")
        columns[key] = array
    return columns


def check_timestamps(name: str, episode: int, timestamps: np.ndarray, fps: float) -> None:
    """An episode's `timestamp` column (where its camera frames are looked up, as lerobot does) must be finite
    and inside the episode, [0, length / fps), within half a frame: a NaN or a time past the episode would decode
    another episode's frame or fail deep in the decoder."""
    half = 0.5 / fps
    bad = ~((timestamps > -half) & (timestamps < (len(timestamps) - 0.5) / fps))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetFormatError(
            f"{name}: episode {episode} frame {row} has timestamp {float(timestamps[row])}, "
            f"outside the episode's [0, {len(timestamps) / fps:g}) s at {fps} fps "
            f"({int(bad.sum())} frame(s) affected); {REPAIR_HINT}"
        )


@dataclass
class _DataFile:
    parquet: pq.ParquetFile
    source: Any  # the opened path or reader; holds a disk-cache pin while the footer is cached
    episode_lo: np.ndarray  # per row group: smallest episode_index (statistics), -1 when unknown
    episode_hi: np.ndarray  # per row group: largest episode_index, int64 max when unknown
    lock: threading.Lock  # a parquet reader serves one read at a time
    users: int = 0  # reads in progress: a file in use is never closed, so never evicted

    def close(self) -> None:
        self.parquet.close(force=True)  # also a remote reader handed in (it holds a disk-cache pin)


class LRU(OrderedDict):
    """An OrderedDict used least recently used first (callers hold the caches' lock)."""

    def touch(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: Any, value: Any, limit: int) -> list[Any]:
        """Store `value`; returns the values evicted to stay within `limit` (for callers that must close them)."""
        self[key] = value
        return [self.popitem(last=False)[1] for _ in range(len(self) - limit)]


class RowCaches:
    """One process's footers and read-ahead futures (never shared across a fork), keyed by full location: the
    sources of a mixture may share them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files = LRU()  # the file's full location -> _DataFile
        self.opening: dict[str, Future] = {}  # files one thread is opening, waited for by the others
        self.pending = LRU()  # (dataset root, episode) -> Future of its EpisodeRows
        self.unread: set[tuple[str, int]] = set()  # (dataset root, episode) read ahead, its row groups not read yet


FOOTER_BYTES = 512 << 10  # a remote data file's tail asked for at its open: its footer in one request, usually
PENDING_READS = 256  # episodes read ahead and not asked for yet (rows are small: KiBs per episode)


class DataRowReader:
    """Rows of any episode of a dataset, read on demand (see the module docstring for cost and memory)."""

    def __init__(
        self,
        meta: DatasetMetadata,
        *,
        footers: int = 8,
        read_ahead_threads: int = 0,
        caches: ProcessLocal | None = None,
        threads: ProcessLocal | None = None,
    ) -> None:
        """
        Args:
            meta: the dataset's metadata (info, episode table, where data files are read from).
            footers: data-file footers (and open files) kept per process: a parsed footer costs ~6 KiB and ~10 us
                of parsing per row group (a 1000-episode file: ~6 MiB, ~10 ms), paid again when a file comes back
                after eviction.
            read_ahead_threads: threads reading episodes named by `read_ahead` in the background (0: off).
            caches: the footers and read-ahead futures (a ProcessLocal of `RowCaches`), shared by the sources of a
                mixture so that open files stay bounded by `footers`, not by the sources; default: its own.
            threads: the read-ahead threads (a ProcessLocal ThreadPoolExecutor), shared by a mixture's sources.
        """
        self.meta = meta
        self.footers = max(1, footers)
        self.read_ahead_threads = read_ahead_threads
        features = meta.info.features
        self.features = data_features(features)
        self.wanted = [k for k, f in features.items() if f["dtype"] != "video"]
        self.image_keys = [k for k in self.wanted if features[k]["dtype"] == "image"]
        self.string_keys = [k for k in self.wanted if features[k]["dtype"] == "string"]
        self.language_keys = language_keys(features)
        self._caches = caches or ProcessLocal(RowCaches)
        self._pool = threads or ProcessLocal(
            partial(ThreadPoolExecutor, max(1, read_ahead_threads), thread_name_prefix="robostream-rows")
        )

    def episode(self, episode: int) -> EpisodeRows:
        """The rows of `episode`; errors name the data file, the episode and the index range."""
        caches = self._caches.get()
        with caches.lock:
            pending = caches.pending.pop((self.meta.root, episode), None)
        return pending.result() if pending is not None else self._read(episode)

    def read_ahead(self, episode: int) -> None:
        """Start reading `episode` in a background thread; `episode()` then returns it (or raises its error)."""
        if not self.read_ahead_threads:
            return
        caches = self._caches.get()
        with caches.lock:
            if (self.meta.root, episode) in caches.pending:
                return
            # Bounded: reads never asked for (an epoch ended early) are forgotten, oldest first.
            caches.pending.put((self.meta.root, episode), self._pool.get().submit(self._read, episode), PENDING_READS)
            caches.unread.add((self.meta.root, episode))

    def _file(self, relative: str, episode: int) -> _DataFile:
        """The open data file, counted as in use: the caller hands it back with `_release`."""
        caches = self._caches.get()
        name = self.meta.describe(relative)
        with caches.lock:
            found = caches.files.touch(name)
            if found is not None:
                found.users += 1
                return found
            opening = caches.opening.get(name)
            if opening is None:  # this thread opens it; the row threads asking meanwhile wait (one HEAD, one footer)
                opening = caches.opening[name] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            opening.result()  # the opener's error, if it failed
            return self._file(relative, episode)
        try:
            data_file = self._open(relative, episode, name)
            opening.set_result(None)
        except BaseException as exc:
            opening.set_exception(exc)
            raise
        finally:
            with caches.lock:
                del caches.opening[name]
        return data_file

    def _open(self, relative: str, episode: int, name: str) -> _DataFile:
        """Open a data file (its footer parsed) and keep it in this process's caches, counted as in use."""
        caches = self._caches.get()
        # Remote: the tail asked for at the open, since pyarrow reads the footer's length, then the footer (one
        # request for both; where this process has not asked for the file's version yet, it tells it too)
        source = self.meta.open(relative, what=f"data file of episode {episode}", last_bytes=FOOTER_BYTES)
        try:
            parquet = pq.ParquetFile(source)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(f"{described(name, source)}: not a readable parquet file: {exc}") from exc
        names = parquet.schema_arrow.names
        missing = [k for k in self.wanted if k not in names]
        if missing:
            parquet.close(force=True)
            raise DatasetFormatError(f"{name}: data file lacks column(s) {missing} declared in info.json")
        lo, hi = _episode_ranges(parquet, names.index("episode_index"))
        data_file = _DataFile(parquet, source, lo, hi, threading.Lock(), users=1)
        if isinstance(source, RangedReader):
            self._fetch_waiting(data_file, relative)
        with caches.lock:
            caches.files[name] = data_file
            # The least recently used files no read is using, down to `footers` (more only while more reads than
            # that are in progress at once; the next opening trims them).
            idle = [key for key, kept in caches.files.items() if kept.users == 0]
            closable = [caches.files.pop(key) for key in idle[: max(0, len(caches.files) - self.footers)]]
        for unused in closable:
            unused.close()
        return data_file

    def _fetch_waiting(self, data_file: _DataFile, relative: str) -> None:
        """Ask now, all at once, for the row groups of this dataset's episodes read ahead and not read yet from the
        remote file `relative` just opened. The row threads then wait for their bytes together instead of in turns:
        at the start of a pass a worker's ~48 live pieces on 16 threads waited 3 round trips for their rows, now 1."""
        caches = self._caches.get()
        with caches.lock:
            waiting = [episode for root, episode in caches.unread if root == self.meta.root]
        spans = []
        for episode in waiting:
            if self.meta.data_file(episode) != relative:
                continue
            groups = np.flatnonzero((data_file.episode_lo <= episode) & (episode <= data_file.episode_hi)).tolist()
            if groups:
                spans.append(_row_groups_span(data_file.parquet.metadata, groups))
        source: RangedReader = data_file.source
        for start, end in merged(spans, gap=source.block_size):
            source.fetch_ahead(start, end, need="now")

    def _release(self, data_file: _DataFile) -> None:
        with self._caches.get().lock:
            data_file.users -= 1

    def _row_groups(self, data_file: _DataFile, name: str, episode: int) -> pa.Table | None:
        """The row groups of `data_file` that may hold `episode` (None: no row group does)."""
        groups = np.flatnonzero((data_file.episode_lo <= episode) & (episode <= data_file.episode_hi)).tolist()
        if not groups:
            return None
        if isinstance(data_file.source, RangedReader):
            # Remote: the row groups' bytes in one merged request before pyarrow reads them column chunk by
            # column chunk (each a round trip otherwise), and here before the file's lock: other episodes' reads
            # go on while these bytes come, and the lock's holder never waits for a round trip.
            data_file.source.load(*_row_groups_span(data_file.parquet.metadata, groups))
        try:
            with data_file.lock:
                return data_file.parquet.read_row_groups(groups, columns=self.wanted, use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(
                f"{described(name, data_file.source)}: row groups {groups[:8]} of episode "
                f"{episode} are unreadable: {exc}"
            ) from exc

    def _read(self, episode: int) -> EpisodeRows:
        relative = self.meta.data_file(episode)
        name = self.meta.describe(relative)
        row = self.meta.episodes.row_of(episode)
        expected = int(self.meta.episodes.from_index[row]), int(self.meta.episodes.to_index[row])
        try:
            data_file = self._file(relative, episode)
            try:
                table = self._row_groups(data_file, name, episode)
            finally:
                self._release(data_file)
        finally:
            with self._caches.get().lock:
                self._caches.get().unread.discard((self.meta.root, episode))
        if table is None or table.num_rows == 0:
            raise DatasetFormatError(
                f"{name}: no data rows for episode {episode} (the episode table says index "
                f"[{expected[0]}, {expected[1]}) is in this file); {REPAIR_HINT}"
            )
        mine = feature_column(table, "episode_index", self.features["episode_index"], name) == episode
        if not mine.all():
            table = table.filter(boolean_array(mine))  # a row group of several episodes (converted datasets)
        columns = {}
        for key in self.wanted:
            if key in self.image_keys or key in self.string_keys or key in self.language_keys:
                continue
            columns[key] = feature_column(table, key, self.features[key], name)
        check_episode_index(name, episode, columns["index"], expected)
        if "timestamp" in columns:
            check_timestamps(name, episode, columns["timestamp"], self.meta.fps)
        return EpisodeRows(
            episode=episode,
            columns=columns,
            images={k: table.column(k).combine_chunks() for k in self.image_keys},
            strings={k: table.column(k).to_pylist() for k in self.string_keys},
            language=language_columns(table, self.language_keys, name, episode),
        )


def _row_groups_span(metadata: pq.FileMetaData, groups: list[int]) -> tuple[int, int]:
    """Bytes [start, end) of the file that hold these row groups' column chunks."""
    start, end = None, 0
    for g in groups:
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            first = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None and o > 0)
            start = first if start is None else min(start, first)
            end = max(end, first + chunk.total_compressed_size)
    return start or 0, end


def _episode_ranges(parquet: pq.ParquetFile, column: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row group the [min, max] episode_index its statistics promise; unknown -> the whole range."""
    groups = parquet.metadata.num_row_groups
    lo = np.full(groups, -1, dtype=np.int64)
    hi = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    for g in range(groups):
        stats = parquet.metadata.row_group(g).column(column).statistics
        if stats is not None and stats.has_min_max:
            lo[g], hi[g] = int(stats.min), int(stats.max)
    return lo, hi
