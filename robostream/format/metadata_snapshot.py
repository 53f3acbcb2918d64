"""A dataset's metadata kept once per node: a second construction, and every other process of the node, loads it
from local disk instead of reading it over the network again.

What construction reads (info.json, the locating columns of every episodes file, tasks, stats) is saved in the
node's derived cache (storage/derived.py) under a key naming the dataset root and the revision of its metadata.
What finding the revision costs:
- a Hub repository root at a commit (hf://datasets/<repo>@<sha>; a branch is pinned to its commit when the
  Storage is made, one request): nothing, the commit names every file;
- a local folder: a walk of meta/ (sizes, modification and change times, inodes), no request;
- a store that lists (S3, GCS, Hub buckets): one listing of meta/, every file's size and ETag;
- plain HTTP, which cannot list: one HEAD of meta/info.json (size and ETag). lerobot rewrites info.json (its
  totals) whenever it changes episodes or tasks; an edit of another meta file alone that leaves info.json as it
  was is not seen over plain HTTP.
A snapshot whose revision no longer matches is never read: the changed dataset has another key and is read anew.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robostream.storage.integrity import FileVersion

SNAPSHOT_KEY = "metadata-v1"


@dataclass(frozen=True)
class MetadataTables:
    """The metadata files as construction uses them: info.json and stats.json as text (parsed, and checked, by
    the caller), the locating columns of each episodes file and the tasks."""

    info_text: str
    episode_parts: list[tuple[dict[str, np.ndarray], str]]  # (columns, file name) per episodes file
    tasks: dict[int, str]
    stats_text: str | None  # None: the dataset has no meta/stats.json


def revision_token(versions: Mapping[str, FileVersion]) -> str:
    """A short hash of the metadata files' versions (relative path -> version)."""
    doc = sorted((path, v.size, v.token) for path, v in versions.items())
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def snapshot_identity(location: str, revision: str) -> str:
    """The derived-cache key of a dataset's metadata at one revision."""
    return f"{SNAPSHOT_KEY}|{location}|{revision}"


def save_tables(tables: MetadataTables, folder: Path) -> None:
    (folder / "info.json").write_text(tables.info_text, encoding="utf-8")
    (folder / "tasks.json").write_text(json.dumps({str(k): v for k, v in tables.tasks.items()}), encoding="utf-8")
    if tables.stats_text is not None:
        (folder / "stats.json").write_text(tables.stats_text, encoding="utf-8")
    (folder / "episodes.json").write_text(json.dumps([name for _, name in tables.episode_parts]), encoding="utf-8")
    for i, (part, _) in enumerate(tables.episode_parts):
        np.savez(folder / f"episodes-{i}.npz", **part)


def load_tables(folder: Path) -> MetadataTables:
    names = json.loads((folder / "episodes.json").read_text(encoding="utf-8"))
    parts = []
    for i, name in enumerate(names):
        with np.load(folder / f"episodes-{i}.npz") as columns:
            parts.append(({k: columns[k] for k in columns.files}, name))
    stats = folder / "stats.json"
    tasks = json.loads((folder / "tasks.json").read_text(encoding="utf-8"))
    return MetadataTables(info_text=(folder / "info.json").read_text(encoding="utf-8"), episode_parts=parts,
                          tasks={int(k): v for k, v in tasks.items()},
                          stats_text=stats.read_text(encoding="utf-8") if stats.is_file() else None)
