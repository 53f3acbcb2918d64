"""`meta/tasks.parquet`: task strings by task_index.

lerobot writes it from a pandas DataFrame whose index is the task string, so the string arrives either as a `task`
column or as the pandas index column; both are accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError


def read_tasks(source: Any, name: str) -> dict[int, str]:
    """Map task_index -> task string, from a path or file object (`name` is used in errors)."""
    path = name
    try:
        table = pq.ParquetFile(source).read(use_threads=False)  # no Arrow threads: see data_columns.py
    except (OSError, pa.ArrowException) as exc:
        raise DatasetFormatError(f"{path}: not a readable parquet file: {exc}") from exc
    names = table.column_names
    text_col = "task" if "task" in names else next((n for n in names if n.startswith("__index_level_")), None)
    if text_col is None or "task_index" not in names:
        raise DatasetFormatError(f"{path}: expected columns 'task' (or the pandas index) and 'task_index', got {names}")
    return {int(i): str(t) for i, t in zip(table.column("task_index").to_pylist(), table.column(text_col).to_pylist())}


def write_tasks(path: Path, tasks: dict[int, str]) -> None:
    """Write tasks the way lerobot does: a DataFrame indexed by the task string with a task_index column."""
    import pandas as pd  # here only: readers and the converter's workers do not pay pandas' import (~0.3 s)

    frame = pd.DataFrame({"task_index": list(tasks.keys())}, index=pd.Index(list(tasks.values()), name="task"))
    table = pa.Table.from_pandas(frame)
    # pandas 3 stores str as large_string; lerobot (pandas 2) writes string: keep the file the same either way
    table = table.cast(
        pa.schema(
            [pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type) for f in table.schema],
            metadata=table.schema.metadata,
        )
    )
    pq.write_table(table, path)
