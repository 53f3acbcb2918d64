"""read_episode_part reads the locating columns of an episodes file (with list-valued stats columns around them, as
lerobot writes them) exactly as pyarrow's ParquetFile reads them, from a path or a file object, and refuses a
missing column, nulls and a file that is not parquet, naming the file."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robostream.errors import DatasetFormatError
from robostream.format.episodes import BASE_COLUMNS, VIDEO_COLUMN_SUFFIXES, read_episode_part

CAMERAS = ["observation.images.top", "observation.images.wrist"]


def _table(rows: int = 4) -> pa.Table:
    columns: dict[str, pa.Array] = {"stats/observation.state/min": pa.array([[0.0, 1.0]] * rows)}
    for name in BASE_COLUMNS:
        columns[name] = pa.array(np.arange(rows) * 3, pa.int64())
    for key in CAMERAS:
        for suffix in VIDEO_COLUMN_SUFFIXES:
            timestamp = suffix.endswith("timestamp")
            values = np.arange(rows) * 0.5 if timestamp else np.arange(rows) // 2
            columns[f"videos/{key}/{suffix}"] = pa.array(values, pa.float64() if timestamp else pa.int64())
        columns[f"stats/{key}/mean"] = pa.array([[[[0.5]]]] * rows)
    columns["tasks"] = pa.array([["pick"]] * rows)
    return pa.table(columns)


def _bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def test_the_locating_columns_as_parquetfile_reads_them_from_a_path_or_a_file_object(tmp_path):
    data = _bytes(_table())
    (tmp_path / "file-000.parquet").write_bytes(data)
    wanted = [*BASE_COLUMNS, *(f"videos/{k}/{s}" for k in CAMERAS for s in VIDEO_COLUMN_SUFFIXES)]
    expected = pq.ParquetFile(io.BytesIO(data)).read(columns=wanted)
    for source in (str(tmp_path / "file-000.parquet"), io.BytesIO(data)):
        part = read_episode_part(source, "file-000.parquet", CAMERAS)
        assert list(part) == wanted
        for column in wanted:
            np.testing.assert_array_equal(part[column], expected.column(column).to_numpy())
            assert part[column].dtype == expected.column(column).type.to_pandas_dtype()


def test_a_missing_column_nulls_and_a_file_that_is_not_parquet_are_refused_naming_the_file():
    table = _table()
    with pytest.raises(DatasetFormatError, match=r"ep\.parquet: episode metadata lacks column\(s\) \['length'\]"):
        read_episode_part(io.BytesIO(_bytes(table.drop_columns(["length"]))), "ep.parquet", CAMERAS)
    nulls = table.set_column(table.schema.get_field_index("length"), "length", pa.array([1, None, 3, 4], pa.int64()))
    with pytest.raises(DatasetFormatError, match=r"ep\.parquet: episode metadata column\(s\) \['length'\] have null"):
        read_episode_part(io.BytesIO(_bytes(nulls)), "ep.parquet", CAMERAS)
    with pytest.raises(DatasetFormatError, match=r"ep\.parquet: not a readable parquet file"):
        read_episode_part(io.BytesIO(b"not parquet at all"), "ep.parquet", CAMERAS)
