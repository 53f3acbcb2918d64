"""`meta/episodes/*.parquet`: one row per episode with the files and spans that hold it.

Only the columns needed to locate data are loaded (the `stats/...` columns can be large); they are kept as numpy
arrays so lookups are cheap and the table can be shared copy-on-write with DataLoader worker processes. The columns
are kept once per node (format/metadata_snapshot.py): parsing the footer of a lerobot episodes file (10-episode
row groups, ~100 columns) costs ~0.2 s per 10k episodes, loading the saved columns milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError
from robostream.format.arrow_values import arrow_values
from robostream.format.paths import render_template

BASE_COLUMNS = (
    "episode_index",
    "length",
    "data/chunk_index",
    "data/file_index",
    "dataset_from_index",
    "dataset_to_index",
)
VIDEO_COLUMN_SUFFIXES = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


@dataclass(frozen=True)
class VideoSpan:
    """Where one camera's frames of one episode live: a file and a time span inside it."""

    chunk_index: int
    file_index: int
    from_timestamp: float
    to_timestamp: float


@dataclass(frozen=True)
class EpisodeTable:
    """Column arrays over the episodes, in episode_index order."""

    episode_index: np.ndarray  # int64 (E,)
    length: np.ndarray  # int64 (E,)
    data_chunk: np.ndarray
    data_file: np.ndarray
    from_index: np.ndarray  # first global `index` of the episode
    to_index: np.ndarray  # one past its last global `index`
    video_chunk: dict[str, np.ndarray]
    video_file: dict[str, np.ndarray]
    video_from_ts: dict[str, np.ndarray]
    video_to_ts: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.episode_index)

    def row_of(self, episode_index: int) -> int:
        """Row of an episode in this table (episodes are stored sorted and contiguous from 0)."""
        row = int(np.searchsorted(self.episode_index, episode_index))
        if row >= len(self.episode_index) or self.episode_index[row] != episode_index:
            raise KeyError(f"episode {episode_index} is not in the dataset (it has {len(self)} episodes)")
        return row

    def lengths_of(self, episodes: Sequence[int] | np.ndarray) -> np.ndarray:
        """Lengths of the given episodes (vectorised: a 100k-episode selection in milliseconds)."""
        episodes = np.asarray(episodes, dtype=np.int64)
        rows = np.searchsorted(self.episode_index, episodes)
        if len(rows) and (rows.max() >= len(self.episode_index) or (self.episode_index[rows] != episodes).any()):
            missing = episodes[
                (rows >= len(self.episode_index)) | (self.episode_index[np.minimum(rows, len(self) - 1)] != episodes)
            ]
            raise KeyError(f"episodes {missing[:10].tolist()} are not in the dataset (it has {len(self)} episodes)")
        return np.ascontiguousarray(self.length[rows])

    def own_video_files(self) -> bool:
        """Whether every camera file holds one episode only (one-episode datasets, one file per episode): then a
        piece is its files' only reader."""
        for key, files in self.video_file.items():
            located = self.video_chunk[key] * (int(files.max(initial=0)) + 1) + files
            if len(np.unique(located)) < len(located):
                return False
        return True

    def video_span(self, episode_index: int, video_key: str) -> VideoSpan:
        row = self.row_of(episode_index)
        return VideoSpan(
            int(self.video_chunk[video_key][row]),
            int(self.video_file[video_key][row]),
            float(self.video_from_ts[video_key][row]),
            float(self.video_to_ts[video_key][row]),
        )


def read_episode_part(source: Any, name: str, video_keys: list[str]) -> dict[str, np.ndarray]:
    """The locating columns of one episode-metadata file (path or file object) as numpy arrays. Only those columns
    are read: a real table also has dozens of `stats/...` columns."""
    wanted = list(BASE_COLUMNS) + [f"videos/{k}/{s}" for k in video_keys for s in VIDEO_COLUMN_SUFFIXES]
    try:
        # pyarrow's reader itself: ParquetFile first maps every nested column path of the file (a real table's
        # list-valued stats columns: ~1.4 ms per file, most of this read), which these flat columns do not need.
        parquet = pq.ParquetReader()
        parquet.open(source, pre_buffer=True, arrow_extensions_enabled=True)
        schema = parquet.schema_arrow
        names = set(schema.names)
        missing = [c for c in wanted if c not in names]
        if missing:
            raise DatasetFormatError(f"{name}: episode metadata lacks column(s) {missing}")
        for column in wanted:
            kind = schema.field(column).type
            timestamp = column.endswith("_timestamp")
            if not (pa.types.is_integer(kind) or (timestamp and pa.types.is_floating(kind))):
                expected = "numbers (seconds)" if timestamp else "integers"
                raise DatasetFormatError(
                    f"{name}: episode metadata column {column!r} holds {kind}, expected "
                    f"{expected}; re-write the dataset's meta/episodes"
                )
        # No Arrow threads: forked DataLoader workers would inherit a pool that cannot run (see data_columns.py).
        # The columns are flat (checked above): each is the leaf of its own name.
        table = parquet.read_all(column_indices=[parquet.column_name_idx(c) for c in wanted], use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetFormatError(f"{name}: not a readable parquet file: {exc}") from exc
    nulls = [c for c in wanted if table.column(c).null_count]
    if nulls:
        raise DatasetFormatError(
            f"{name}: episode metadata column(s) {nulls} have null values; re-write the dataset's meta/episodes"
        )
    # Copies: a view of the table's buffers would keep the file's reader, and the file, open as long as it lives.
    return {c: arrow_values(table.column(c)).copy() for c in wanted}


def episode_table(
    parts: list[tuple[dict[str, np.ndarray], str]], video_keys: list[str], fps: float, video_path: str | None
) -> EpisodeTable:
    """Concatenate the parts of every episode-metadata file ((part, file name) pairs), sorted by episode, and
    check them: every episode once, length == dataset_to_index - dataset_from_index, each camera's video span
    (to_timestamp - from_timestamp) the episode's length / fps (see `check_video_spans`), and no two spans of one
    camera file overlapping (see `check_spans_apart`; video_path: info.json's template, to name the file)."""
    if not parts:
        raise DatasetFormatError("meta/episodes/: no episode metadata parquet files found")
    episodes = np.concatenate([np.asarray(p["episode_index"], dtype=np.int64) for p, _ in parts])
    order = np.argsort(episodes, kind="stable")

    def col(name: str, dtype: type) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([np.asarray(p[name]) for p, _ in parts]).astype(dtype)[order])

    episodes = episodes[order]
    if len(np.unique(episodes)) != len(episodes):
        raise DatasetFormatError(f"{parts[0][1]}: episode metadata lists an episode_index more than once")
    from_index, to_index, length = (
        col("dataset_from_index", np.int64),
        col("dataset_to_index", np.int64),
        col("length", np.int64),
    )
    bad = np.nonzero(to_index - from_index != length)[0]
    if len(bad):
        e = int(episodes[bad[0]])
        raise DatasetFormatError(
            f"{parts[0][1]}: episode {e} has length {int(length[bad[0]])} but dataset index range "
            f"[{int(from_index[bad[0]])}, {int(to_index[bad[0]])})"
        )
    video_from_ts = {k: col(f"videos/{k}/from_timestamp", np.float64) for k in video_keys}
    video_to_ts = {k: col(f"videos/{k}/to_timestamp", np.float64) for k in video_keys}
    video_chunk = {k: col(f"videos/{k}/chunk_index", np.int64) for k in video_keys}
    video_file = {k: col(f"videos/{k}/file_index", np.int64) for k in video_keys}
    for key in video_keys:
        check_video_spans(parts[0][1], key, episodes, length, video_from_ts[key], video_to_ts[key], fps)
        check_spans_apart(
            parts[0][1],
            key,
            video_path,
            episodes,
            video_chunk[key],
            video_file[key],
            video_from_ts[key],
            video_to_ts[key],
            fps,
        )
    return EpisodeTable(
        episode_index=episodes,
        length=length,
        data_chunk=col("data/chunk_index", np.int64),
        data_file=col("data/file_index", np.int64),
        from_index=from_index,
        to_index=to_index,
        video_chunk=video_chunk,
        video_file=video_file,
        video_from_ts=video_from_ts,
        video_to_ts=video_to_ts,
    )


def check_video_spans(
    name: str, key: str, episodes: np.ndarray, length: np.ndarray, from_ts: np.ndarray, to_ts: np.ndarray, fps: float
) -> None:
    """Each episode's span of camera `key` must be finite, start at >= 0 and last length / fps seconds within
    half a frame: lerobot writes exactly that, and a span off by a frame or more (an edited or mis-converted
    table) would make every frame of the episode a neighbour's, inside the decoder's tolerance. Vectorised: a
    100k-episode table in milliseconds."""
    span = to_ts - from_ts
    bad = ~np.isfinite(span) | (from_ts < 0) | ~(np.abs(span - length / fps) <= 0.5 / fps)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetFormatError(
            f"{name}: episode {int(episodes[row])} camera {key!r}: video span [{from_ts[row]}, {to_ts[row]}) s lasts "
            f"{span[row]:.6f} s, but its {int(length[row])} frames at {fps} fps last {length[row] / fps:.6f} s "
            f"({int(bad.sum())} episode(s) affected); the episode table and the videos disagree: re-convert or "
            "re-write the dataset"
        )


def check_spans_apart(
    name: str,
    key: str,
    video_path: str | None,
    episodes: np.ndarray,
    chunk: np.ndarray,
    file: np.ndarray,
    from_ts: np.ndarray,
    to_ts: np.ndarray,
    fps: float,
) -> None:
    """No two episodes' spans of camera `key` may overlap inside one file by more than half a frame (spans that
    touch are how lerobot writes them): a span shifted by a frame or more at both ends keeps its length, so
    `check_video_spans` passes it, but it then covers a neighbour's frames. Vectorised: the spans in (chunk, file,
    from) order, each compared with the next one in its file; 2 ms for 100k episodes in lerobot's order (episodes
    in file order), a sort (25 ms) otherwise."""
    if not _in_file_order(chunk, file, from_ts):
        order = np.lexsort((from_ts, file, chunk))
        chunk, file, from_ts, to_ts, episodes = (a[order] for a in (chunk, file, from_ts, to_ts, episodes))
    same_file = (chunk[1:] == chunk[:-1]) & (file[1:] == file[:-1])
    overlapping = same_file & (to_ts[:-1] - from_ts[1:] > 0.5 / fps)
    if not overlapping.any():
        return
    first = int(np.flatnonzero(overlapping)[0])
    second = first + 1
    where = f"chunk_index {int(chunk[first])} file_index {int(file[first])}"
    if video_path is not None:
        where = render_template(
            video_path,
            what=f"video_path of camera {key!r}",
            video_key=key,
            chunk_index=int(chunk[first]),
            file_index=int(file[first]),
            episode_chunk=int(chunk[first]),
            episode_index=int(episodes[first]),
        )
    raise DatasetFormatError(
        f"{name}: camera {key!r}: in {where} the video spans of episode {int(episodes[first])} "
        f"[{from_ts[first]}, {to_ts[first]}) s and episode {int(episodes[second])} [{from_ts[second]}, "
        f"{to_ts[second]}) s overlap ({int(overlapping.sum())} overlapping pair(s)), so one episode would read the "
        "other's frames; the episode table and the videos disagree: re-convert or re-write the dataset"
    )


def _in_file_order(chunk: np.ndarray, file: np.ndarray, from_ts: np.ndarray) -> bool:
    """Whether the rows are already sorted by (chunk, file, from), as lerobot writes episodes (O(E), no sort)."""
    next_chunk, next_file = np.diff(chunk), np.diff(file)
    return bool(
        (
            (next_chunk > 0) | ((next_chunk == 0) & ((next_file > 0) | ((next_file == 0) & (np.diff(from_ts) >= 0))))
        ).all()
    )
