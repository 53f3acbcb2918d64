"""The last step: the metadata of the v3.0 dataset (episodes table, tasks, stats, info) as lerobot 0.6.1 writes
it, then the journaled swap into place.

Metadata files are written to temp names and renamed into the staging dataset, so rerunning after a crash simply
writes them again. The swap is recorded in `swap.json` before it starts; in place it exchanges ROOT and the staging
folder with one renameat2(RENAME_EXCHANGE) where the filesystem offers it (ROOT always holds the old or the new
dataset), else with two renames whose in-between state (no ROOT) a rerun completes from the journal.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.convert.faults import crash_point
from robostream.convert.manifest import read_json, write_json_atomic
from robostream.convert.plan import FileTask, next_file, span_of_each_episode, video_timestamps
from robostream.convert.planning import ConversionPlan
from robostream.durable import fsync_dir
from robostream.errors import RobostreamError
from robostream.format.paths import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH
from robostream.format.stats import aggregate_stacked
from robostream.format.tasks import write_tasks
from robostream.format.v21 import V21Dataset

V30 = "v3.0"
# lerobot writes the episodes table as one file and refuses it when `nbytes // MiB > 100` (from 101 MiB in memory)
EPISODES_TABLE_REFUSED_BYTES = 101 * 1024**2
# DatasetInfo field order of lerobot 0.6.1 (dataclasses.asdict), with the defaults of fields v2.1 may lack.
INFO_FIELDS: dict[str, Any] = {
    "codebase_version": None,
    "fps": None,
    "features": None,
    "total_episodes": 0,
    "total_frames": 0,
    "total_tasks": 0,
    "chunks_size": 1000,
    "data_files_size_in_mb": 100,
    "video_files_size_in_mb": 200,
    "data_path": None,
    "video_path": None,
    "robot_type": None,
    "splits": {},
    "tools": None,
}


def _arrow_lists(stacked: np.ndarray) -> pa.Array:
    """Per-episode arrays stacked as (E, *shape) -> nested list column, as HF datasets types numpy arrays."""
    values: pa.Array = pa.array(stacked.reshape(-1), type=pa.from_numpy_dtype(stacked.dtype))
    for size in reversed(stacked.shape[1:]):
        offsets = pa.array(np.arange(0, len(values) + 1, size, dtype=np.int32))
        values = pa.ListArray.from_arrays(offsets, values)
    return values


def episodes_table(
    dataset: V21Dataset, plan: ConversionPlan, tasks: list[FileTask], stats: dict[str, dict[str, np.ndarray]]
) -> pa.Table:
    """lerobot's episodes table: data placement, then each camera's (sorted), then the v2.1 episode line, then the
    flattened per-episode stats in their jsonl order, then the table's own location."""
    data_spans = span_of_each_episode([t.span for t in tasks if t.kind == "data"])
    columns: dict[str, list[Any]] = {"episode_index": [e.episode_index for e in dataset.episodes]}
    columns["data/chunk_index"] = [s.chunk_index for s in data_spans]
    columns["data/file_index"] = [s.file_index for s in data_spans]
    ends = np.cumsum(plan.data["rows"]).tolist()
    columns["dataset_from_index"] = [0] + ends[:-1]
    columns["dataset_to_index"] = ends
    for key in sorted(plan.videos):
        spans = [t.span for t in tasks if t.video_key == key]
        per_episode = span_of_each_episode(spans)
        stamps = video_timestamps(plan.videos[key]["duration_s"].tolist(), spans)
        columns[f"videos/{key}/chunk_index"] = [s.chunk_index for s in per_episode]
        columns[f"videos/{key}/file_index"] = [s.file_index for s in per_episode]
        columns[f"videos/{key}/from_timestamp"] = [a for a, _ in stamps]
        columns[f"videos/{key}/to_timestamp"] = [b for _, b in stamps]
    columns["tasks"] = [e.tasks for e in dataset.episodes]
    columns["length"] = [e.length for e in dataset.episodes]
    for name in dataset.episodes[0].extra if dataset.episodes else {}:
        columns[name] = [e.extra.get(name) for e in dataset.episodes]
    arrays = {
        name: pa.array(values, type=pa.list_(pa.string()) if name == "tasks" else None)
        for name, values in columns.items()
    }
    for feature, feature_stats in stats.items():
        for stat, stacked in feature_stats.items():
            arrays[f"stats/{feature}/{stat}"] = _arrow_lists(stacked)
    arrays["meta/episodes/chunk_index"] = pa.array(np.zeros(len(dataset.episodes), dtype=np.int64))
    arrays["meta/episodes/file_index"] = pa.array(np.zeros(len(dataset.episodes), dtype=np.int64))
    return pa.table(arrays)


def episode_table_files(table: pa.Table) -> list[tuple[tuple[int, int], pa.Table]]:
    """The episodes table as lerobot 0.6.1's converter writes it: one file, meta/episodes/chunk-000/file-000.

    lerobot refuses a table of 101 MiB or more (about 50k episodes of a 3-camera, 14-dof dataset). Then it is split
    here into equal runs of episodes under the limit, in files that roll over like every v3.0 file, with each row's
    `meta/episodes/chunk_index`/`file_index` naming its file: the layout lerobot's recorder writes and every v3.0
    reader (lerobot's and ours) loads. A deliberate difference from lerobot, which cannot convert such datasets.
    """
    if table.nbytes < EPISODES_TABLE_REFUSED_BYTES:
        return [((0, 0), table)]
    parts = -(-table.nbytes // EPISODES_TABLE_REFUSED_BYTES)
    rows = -(-table.num_rows // parts)
    out, chunk_index, file_index = [], 0, 0
    for start in range(0, table.num_rows, rows):
        part = table.slice(start, rows)
        for name, value in (("meta/episodes/chunk_index", chunk_index), ("meta/episodes/file_index", file_index)):
            column = pa.array(np.full(part.num_rows, value, dtype=np.int64))
            part = part.set_column(part.column_names.index(name), name, column)
        out.append(((chunk_index, file_index), part))
        chunk_index, file_index = next_file(chunk_index, file_index)
    return out


def info_json(dataset: V21Dataset, plan: ConversionPlan) -> dict[str, Any]:
    """info.json as lerobot 0.6.1's converter writes it (unknown keys dropped, fps on non-video features)."""
    info = json.loads(json.dumps(dataset.info))
    info["codebase_version"] = V30
    info.pop("total_chunks", None)
    info.pop("total_videos", None)
    info["data_files_size_in_mb"] = _number(plan.data_limit_mb)
    info["video_files_size_in_mb"] = _number(plan.video_limit_mb)
    info["data_path"] = DEFAULT_DATA_PATH
    info["video_path"] = DEFAULT_VIDEO_PATH if info.get("video_path") is not None else None
    info["fps"] = int(info["fps"])
    for feature in info["features"].values():
        if feature["dtype"] != "video":
            feature["fps"] = info["fps"]
    out = {key: info.get(key, default) for key, default in INFO_FIELDS.items()}
    if out["tools"] is None:
        del out["tools"]
    return out


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def place_file(stage: Path, tmp: Path, rel: str, write: Callable[[Path], object]) -> None:
    """Publish a file at `stage / rel`: `write` makes it at a scratch name in `tmp`, fsynced, then renamed there (a
    crash leaves the old file or the whole new one; rerunning writes it again)."""
    tmp.mkdir(parents=True, exist_ok=True)
    scratch = tmp / Path(rel).name
    write(scratch)
    with scratch.open("rb") as handle:
        os.fsync(handle.fileno())
    target = stage / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(scratch, target)
    fsync_dir(target.parent)


def write_metadata(
    stage: Path,
    tmp: Path,
    dataset: V21Dataset,
    plan: ConversionPlan,
    tasks: list[FileTask],
    episode_stats: dict[str, dict[str, np.ndarray]],
) -> None:
    """Write meta/ of the staged dataset (each file to a temp name in `tmp`, fsynced, then renamed).

    episode_stats: per-episode stats stacked along axis 0, as `format.v21.read_episode_stats` returns them."""

    def place(rel: str, write) -> None:
        place_file(stage, tmp, rel, write)

    table = episodes_table(dataset, plan, tasks, episode_stats)
    for (chunk_index, file_index), part in episode_table_files(table):
        place(
            DEFAULT_EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index),
            lambda p, part=part: pq.write_table(part, p),
        )
    crash_point("metadata-written")
    place("meta/tasks.parquet", lambda p: write_tasks(p, dataset.tasks))
    stats = aggregate_stacked(episode_stats)
    stats_doc = {f: {k: np.asarray(v).tolist() for k, v in s.items()} for f, s in stats.items()}
    place("meta/stats.json", lambda p: p.write_text(json.dumps(stats_doc, indent=4)))
    place("meta/info.json", lambda p: p.write_text(json.dumps(info_json(dataset, plan), indent=4)))


# -- swap ------------------------------------------------------------------------------------------------------
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where the system or filesystem cannot."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    if not hasattr(libc, "renameat2"):
        return False
    result = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no exchange here, use two renames
        return False
    raise OSError(errno, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(errno)}")


def is_v30(root: Path) -> bool:
    doc = read_json(root / "meta" / "info.json") if root.is_dir() else None
    return isinstance(doc, dict) and doc.get("codebase_version") == V30


def swap(journal: Path, stage: Path, root: Path, *, out: Path | None) -> None:
    """Move the staged dataset into place, resuming a swap a crash interrupted (see the module docstring).

    in place (out None): ROOT becomes the new dataset, the input is kept as ROOT_old (lerobot's naming).
    `out`: the staged dataset is renamed to `out`, which must not exist; the input is not touched.
    """
    if out is not None:
        if not (out.exists() and is_v30(out) and not stage.exists()):
            os.rename(stage, out)  # fails if out exists (non-empty)
        fsync_dir(out.parent)
        return
    old = root.with_name(f"{root.name}_old")
    if read_json(journal) is None:
        if old.exists():
            raise RobostreamError(
                f"{old}: exists; the input is kept there after an in-place conversion. Move it "
                "away (or pass --out DIR) and run again"
            )
        write_json_atomic(journal, {"root": str(root), "old": str(old), "stage": str(stage)})
    if stage.exists() and root.exists() and not is_v30(root):
        if exchange(stage, root):  # root: new; stage: old
            fsync_dir(root.parent)
            crash_point("swap-half")
            os.rename(stage, old)
        else:
            os.rename(root, old)
            fsync_dir(root.parent)
            crash_point("swap-half")
            os.rename(stage, root)
    elif stage.exists() and not root.exists():
        os.rename(stage, root)  # crashed between the two renames
    elif stage.exists() and is_v30(root) and not old.exists():
        os.rename(stage, old)  # crashed after the exchange
    fsync_dir(root.parent)
