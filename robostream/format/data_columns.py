"""Random access to the data rows of any episode through columns derived from its data file, for map-style reads.

Each data file is converted once per node, on the first read of any of its episodes, into a derived folder
(storage/derived.py): its numeric columns as raw little arrays one after the other (columns.bin), an Arrow IPC file
for image, string and language columns, and an index of where each episode's rows start. A process opens a
converted file in O(1) and reads an episode's rows with one positional read per column (an episode's rows are
contiguous): no parquet decoding, no per-process table, the OS page cache shared by ranks and workers, memory flat
in dataset size. The rows an episode has are checked against the episode table on every read: missing or
out-of-order rows are an error naming the file, the episode and the index range.

A data file that nothing but its size names (an HTTP server sending neither ETag nor Last-Modified) is never
converted: columns kept from it would be served after a same-size replacement. Its episodes' rows are read from
the file's row groups on every read, as streaming reads them (format/data_rows.py).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.array_file import read_arrays, write_arrays
from robostream.errors import DatasetFormatError
from robostream.format.data_rows import (
    LRU,
    REPAIR_HINT,
    DataRowReader,
    EpisodeRows,
    check_episode_index,
    check_timestamps,
    data_features,
    feature_column,
    language_columns,
)
from robostream.format.language import LANGUAGE_DTYPE
from robostream.format.metadata import DatasetMetadata
from robostream.process_local import ProcessLocal
from robostream.storage.cache import described
from robostream.storage.derived import DerivedCache

FORMAT = "data-columns-v4"  # v3: columns cast to the dtypes info.json declares; v4: episodes in an array file
COLUMNS = "columns.bin"  # every numeric column's rows, one column after the other
OTHER = "other.arrow"  # image, string and language columns
EPISODES = "episodes.arrays"  # (episode index, first row, rows) of each episode in the file


@dataclass(frozen=True)
class _Column:
    dtype: np.dtype
    shape: tuple[int, ...]  # per row
    offset: int  # of row 0 in columns.bin
    row_bytes: int


@dataclass(frozen=True)
class _ConvertedFile:
    fd: int  # columns.bin, open for positional reads
    columns: dict[str, _Column]
    other: pa.Table | None  # image/string/language columns, memory-mapped
    episodes: np.ndarray  # (E, 3): episode_index, first row, rows (sorted by episode_index)

    def close(self) -> None:
        os.close(self.fd)


class DataColumns:
    """Rows of any episode from the columns derived from its data file (see the module docstring)."""

    def __init__(
        self, meta: DatasetMetadata, derived: DerivedCache, *, open_files: int = 256, episodes: int = 32
    ) -> None:
        """
        Args:
            meta: the dataset's metadata.
            derived: where the columns of each data file are kept (once per node).
            open_files: converted data files a process keeps open (one file handle each).
            episodes: episodes whose rows a process keeps (a window, a batch or a sampler revisits them); each
                costs its rows (~100 rows x ~150 bytes for a 14-d state/action dataset).
        """
        self.meta, self.derived = meta, derived
        self.open_files, self.keep = open_files, episodes
        features = meta.info.features
        self.wanted = [k for k, f in features.items() if f["dtype"] != "video"]
        self.other_keys = [k for k in self.wanted if features[k]["dtype"] in ("image", "string", LANGUAGE_DTYPE)]
        self._files = ProcessLocal(LRU)  # converted files open in this process
        # data files nothing names a version of (read from the source each time)
        self._unnamed: ProcessLocal[set[str]] = ProcessLocal(set)
        self._from_source = DataRowReader(meta)
        self._episodes = ProcessLocal(LRU)
        self._lock = ProcessLocal(threading.Lock)

    def episode(self, episode: int) -> EpisodeRows:
        kept, lock = self._episodes.get(), self._lock.get()
        with lock:
            rows = kept.touch(episode)
        if rows is None:
            rows = self._read(episode)
            with lock:
                kept.put(episode, rows, self.keep)
        return rows

    def _read(self, episode: int) -> EpisodeRows:
        relative = self.meta.data_file(episode)
        converted = self._converted(relative, episode)
        if converted is None:
            return self._from_source.episode(episode)
        name = self.meta.describe(relative)
        found = int(np.searchsorted(converted.episodes[:, 0], episode))
        row = self.meta.episodes.row_of(episode)
        expected = int(self.meta.episodes.from_index[row]), int(self.meta.episodes.to_index[row])
        if found == len(converted.episodes) or converted.episodes[found, 0] != episode:
            raise DatasetFormatError(
                f"{name}: no data rows for episode {episode} (the episode table says index "
                f"[{expected[0]}, {expected[1]}) is in this file); {REPAIR_HINT}"
            )
        _, first, count = (int(v) for v in converted.episodes[found])
        columns = {}
        for key, column in converted.columns.items():
            # Positional reads, not a memory map: only the rows asked for enter this process (a map would count
            # every touched page, and the pages around it, in each worker's RSS for the rest of its life).
            data = os.pread(converted.fd, count * column.row_bytes, column.offset + first * column.row_bytes)
            columns[key] = np.frombuffer(data, dtype=column.dtype).reshape(count, *column.shape)
        check_episode_index(name, episode, columns["index"], expected)
        if "timestamp" in columns:
            check_timestamps(name, episode, columns["timestamp"], self.meta.fps)
        if converted.other is None:  # the file has no image, string or language column
            return EpisodeRows(episode=episode, columns=columns, images={}, strings={}, language={})
        other = converted.other.slice(first, count)
        return EpisodeRows(
            episode=episode,
            columns=columns,
            images={k: other.column(k) for k in self._from_source.image_keys},
            strings={k: other.column(k).to_pylist() for k in self._from_source.string_keys},
            language=language_columns(other, self._from_source.language_keys, name, episode),
        )

    def _converted(self, relative: str, episode: int) -> _ConvertedFile | None:
        """The converted columns of a data file, None for a file nothing names a version of (module docstring)."""
        files, lock, unnamed = self._files.get(), self._lock.get(), self._unnamed.get()
        with lock:
            found = files.touch(relative)
        if found is not None or relative in unnamed:
            return found
        source = self.meta.data_storage.identity(relative, what=f"data file of episode {episode}")
        if source is None:
            unnamed.add(relative)
            return None
        identity = f"{FORMAT}|{source}|{','.join(self.wanted)}"
        converted = self.derived.open(identity, lambda out: self._convert(relative, episode, out), _open)
        with lock:
            evicted = files.put(relative, converted, self.open_files)
        for closing in evicted:
            closing.close()
        return converted

    def _convert(self, relative: str, episode: int, out: Path) -> None:
        """Read one data file's columns and write them to `out` with the episode index."""
        source = self.meta.open(relative, what=f"data file of episode {episode}")
        name = described(self.meta.describe(relative), source)
        try:
            parquet = pq.ParquetFile(source)
            missing = [k for k in self.wanted if k not in parquet.schema_arrow.names]
            if missing:
                raise DatasetFormatError(f"{name}: data file lacks column(s) {missing} declared in info.json")
            # No Arrow threads in any read: a DataLoader worker forked while the parent's Arrow pool was busy
            # deadlocks in it (seen with map-style workers converting files).
            table = parquet.read(columns=self.wanted, use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(f"{name}: not a readable parquet file: {exc}") from exc
        features = data_features(self.meta.info.features)
        layout, offset = {}, 0
        with open(out / COLUMNS, "wb") as sink:
            for key in (k for k in self.wanted if k not in self.other_keys):
                values = feature_column(table, key, features[key], name)
                sink.write(values.tobytes())
                layout[key] = {"dtype": values.dtype.str, "shape": list(values.shape[1:]), "offset": offset}
                offset += values.nbytes
                if key == "episode_index":
                    # Where each episode's rows start in file order; whether they are its rows, in order, is
                    # checked on every read.
                    ids, first, counts = np.unique(values, return_index=True, return_counts=True)
                    write_arrays(out / EPISODES, {"episodes": np.stack([ids, first, counts], axis=1).astype(np.int64)})
        if self.other_keys:
            other = table.select(self.other_keys)
            with pa.OSFile(str(out / OTHER), "wb") as sink, pa.ipc.new_file(sink, other.schema) as writer:
                writer.write_table(other)
        (out / "columns.json").write_text(json.dumps(layout))


def _open(folder: Path) -> _ConvertedFile:
    """Open a converted data file (O(1): nothing but its small episode index is read)."""
    layout = json.loads((folder / "columns.json").read_text())
    columns = {
        k: _Column(
            np.dtype(c["dtype"]),
            tuple(c["shape"]),
            int(c["offset"]),
            np.dtype(c["dtype"]).itemsize * int(np.prod(c["shape"], dtype=np.int64)),
        )
        for k, c in layout.items()
    }
    episodes = read_arrays(folder / EPISODES)["episodes"]
    whole = episodes.dtype == np.int64 and episodes.ndim == 2 and episodes.shape[1] == 3
    rows = int(episodes[:, 2].sum()) if whole else -1
    expected = sum(c.row_bytes for c in columns.values()) * rows
    if rows < 0 or (folder / COLUMNS).stat().st_size != expected:
        raise ValueError(f"{folder / COLUMNS}: {(folder / COLUMNS).stat().st_size} bytes, its layout says {expected}")
    other = None
    if (folder / OTHER).is_file():
        try:
            other = pa.ipc.open_file(pa.memory_map(str(folder / OTHER))).read_all()
        except pa.ArrowException as exc:
            raise ValueError(f"{folder / OTHER}: {exc}") from exc
    return _ConvertedFile(fd=os.open(folder / COLUMNS, os.O_RDONLY), columns=columns, other=other, episodes=episodes)
