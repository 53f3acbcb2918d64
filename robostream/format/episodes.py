"""`meta/episodes/*.parquet`: one row per episode with the files and spans that hold it.

Only the columns needed to locate data are loaded (the `stats/...` columns can be large); they are kept as numpy
arrays so lookups are cheap and the table can be shared copy-on-write with DataLoader worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError

BASE_COLUMNS = ("episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                "dataset_to_index")
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
    tasks: list[list[str]]
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

    def video_span(self, episode_index: int, video_key: str) -> VideoSpan:
        row = self.row_of(episode_index)
        return VideoSpan(int(self.video_chunk[video_key][row]), int(self.video_file[video_key][row]),
                         float(self.video_from_ts[video_key][row]), float(self.video_to_ts[video_key][row]))


def read_episode_table(files: list[tuple[Any, str]], video_keys: list[str]) -> EpisodeTable:
    """Read and concatenate the episode metadata files ((path or file object, name) pairs), validating the columns
    each needs and reading only those."""
    if not files:
        raise DatasetFormatError("meta/episodes/: no episode metadata parquet files found")
    wanted = list(BASE_COLUMNS) + ["tasks"] + [f"videos/{k}/{s}" for k in video_keys for s in VIDEO_COLUMN_SUFFIXES]
    tables = []
    for source, name in files:
        try:
            parquet = pq.ParquetFile(source)
            names = parquet.schema_arrow.names
            missing = [c for c in wanted if c not in names and c != "tasks"]
            if missing:
                raise DatasetFormatError(f"{name}: episode metadata lacks column(s) {missing}")
            tables.append(parquet.read(columns=[c for c in wanted if c in names]))
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(f"{name}: not a readable parquet file: {exc}") from exc
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    order = np.argsort(table.column("episode_index").to_numpy(), kind="stable")
    table = table.take(pa.array(order))

    def col(name: str, dtype: type) -> np.ndarray:
        return np.ascontiguousarray(table.column(name).to_numpy(zero_copy_only=False).astype(dtype))

    episodes = col("episode_index", np.int64)
    if len(np.unique(episodes)) != len(episodes):
        raise DatasetFormatError(f"{files[0][1]}: episode metadata lists an episode_index more than once")
    from_index, to_index, length = col("dataset_from_index", np.int64), col("dataset_to_index", np.int64), col(
        "length", np.int64)
    bad = np.nonzero(to_index - from_index != length)[0]
    if len(bad):
        e = int(episodes[bad[0]])
        raise DatasetFormatError(
            f"{files[0][1]}: episode {e} has length {int(length[bad[0]])} but dataset index range "
            f"[{int(from_index[bad[0]])}, {int(to_index[bad[0]])})")
    tasks = table.column("tasks").to_pylist() if "tasks" in table.column_names else [[] for _ in episodes]
    return EpisodeTable(
        episode_index=episodes,
        length=length,
        data_chunk=col("data/chunk_index", np.int64),
        data_file=col("data/file_index", np.int64),
        from_index=from_index,
        to_index=to_index,
        tasks=[list(t or []) for t in tasks],
        video_chunk={k: col(f"videos/{k}/chunk_index", np.int64) for k in video_keys},
        video_file={k: col(f"videos/{k}/file_index", np.int64) for k in video_keys},
        video_from_ts={k: col(f"videos/{k}/from_timestamp", np.float64) for k in video_keys},
        video_to_ts={k: col(f"videos/{k}/to_timestamp", np.float64) for k in video_keys},
    )
