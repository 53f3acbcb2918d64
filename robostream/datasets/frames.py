"""The per-frame table of the selected episodes, loaded from the data parquet files into numpy columns.

Numeric columns become contiguous numpy arrays (shared copy-on-write with forked DataLoader workers, indexed without
Python-object overhead); image columns stay as Arrow arrays of PNG bytes and are decoded on access.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError
from robostream.format.metadata import DatasetMetadata


@dataclass(frozen=True)
class FrameTable:
    """Rows of the selected episodes in global-index order; episodes occupy contiguous row ranges."""

    columns: dict[str, np.ndarray]  # numeric features, (N,) or (N, *shape)
    images: dict[str, pa.Array]  # image features: struct<bytes, path> per row
    strings: dict[str, list[str]]  # string features
    episode_first_row: dict[int, int]  # episode_index -> its first row

    def __len__(self) -> int:
        return len(self.columns["index"])


def _to_numpy(column: pa.ChunkedArray | pa.Array, rows: int) -> np.ndarray:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    shape: list[int] = []
    while pa.types.is_fixed_size_list(array.type) or pa.types.is_list(array.type):
        if pa.types.is_fixed_size_list(array.type):
            shape.append(array.type.list_size)
        else:  # variable lists written by other tools: all rows must have one length
            lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                raise ValueError("ragged list column")
            shape.append(int(lengths[0]) if len(lengths) else 0)
        array = array.flatten()
    return np.ascontiguousarray(array.to_numpy(zero_copy_only=False).reshape([rows, *shape]))


def load_frame_table(meta: DatasetMetadata, episodes: list[int]) -> FrameTable:
    """Read the data rows of `episodes` (sorted episode indices) and check they match the episode table."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for ep in episodes:
        by_file[meta.data_file(ep)].append(ep)
    image_keys = set(meta.info.image_keys)
    string_keys = {k for k, f in meta.info.features.items() if f["dtype"] == "string"}
    wanted = [k for k, f in meta.info.features.items() if f["dtype"] != "video"]
    tables = []
    for relative, eps in sorted(by_file.items(), key=lambda kv: kv[1][0]):
        name = meta.describe(relative)
        source = meta.open(relative, what=f"data file of episode(s) {eps[:5]}")
        try:
            parquet = pq.ParquetFile(source)
            missing = [k for k in wanted if k not in parquet.schema_arrow.names]
            if missing:
                raise DatasetFormatError(f"{name}: data file lacks column(s) {missing} declared in info.json")
            # Row groups whose statistics exclude these episodes are never read (remote: never fetched).
            table = pq.read_table(source, columns=wanted, filters=[("episode_index", "in", eps)])
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(f"{name}: not a readable parquet file: {exc}") from exc
        tables.append((name, table))
    table = pa.concat_tables([t for _, t in tables]) if tables else None
    if table is None or table.num_rows == 0:
        raise DatasetFormatError(f"{meta.root}: no data rows for episodes {episodes[:5]}")
    order = np.argsort(table.column("index").to_numpy(), kind="stable")
    table = table.take(pa.array(order))
    rows = table.num_rows
    columns: dict[str, np.ndarray] = {}
    for name in wanted:
        if name in image_keys or name in string_keys:
            continue
        try:
            columns[name] = _to_numpy(table.column(name), rows)
        except ValueError as exc:
            raise DatasetFormatError(f"{meta.root}: column {name!r} could not be read as an array: {exc}") from exc
    first_row = _check_episodes(meta, episodes, columns, tables)
    return FrameTable(
        columns=columns,
        images={k: table.column(k).combine_chunks() for k in wanted if k in image_keys},
        strings={k: table.column(k).to_pylist() for k in wanted if k in string_keys},
        episode_first_row=first_row,
    )


def _check_episodes(meta: DatasetMetadata, episodes: list[int], columns: dict[str, np.ndarray],
                    tables: list[tuple[str, pa.Table]]) -> dict[int, int]:
    """Every selected episode must own exactly its [from, to) index range, in order, with no gap."""
    episode_col, index_col = columns["episode_index"], columns["index"]
    boundaries = np.flatnonzero(np.diff(episode_col)) + 1
    starts = np.concatenate([[0], boundaries])
    found = episode_col[starts]
    first_row: dict[int, int] = {}
    for ep, start, end in zip(found, starts, np.append(boundaries, len(episode_col))):
        row = meta.episodes.row_of(int(ep))
        lo, hi = int(meta.episodes.from_index[row]), int(meta.episodes.to_index[row])
        if end - start != hi - lo or index_col[start] != lo or index_col[end - 1] != hi - 1:
            raise DatasetFormatError(
                f"{meta.describe(meta.data_file(int(ep)))}: episode {int(ep)} has {end - start} rows with "
                f"index {int(index_col[start])}..{int(index_col[end - 1])}, but the episode table says [{lo}, {hi})")
        first_row[int(ep)] = int(start)
    missing = sorted(set(episodes) - set(first_row))
    if missing:
        raise DatasetFormatError(f"{tables[0][0]}: no data rows found for episode(s) {missing[:10]}")
    return first_row
