"""A dataset's metadata kept once per node: a second construction, and every other process of the node, loads it
from local disk instead of reading it over the network again.

What construction reads (info.json, the locating columns of every episodes file, tasks, stats) is saved in the
node's derived cache (storage/derived.py) under a key naming the dataset root and the revision of its metadata:
every file of meta/ the snapshot depends on, each named by its size and version token, or by the sha256 of its
bytes where nothing else names it. What finding the revision costs:
- a Hub repository root at a commit (hf://datasets/<repo>@<sha>; a branch is pinned to its commit when the
  Storage is made, one request): nothing, the commit names every file;
- a local folder: a walk of meta/ (sizes, modification and change times, inodes), no request;
- a store that lists (S3, GCS, Hub buckets): one listing of meta/, every file's size and ETag (a file listed
  without one is read whole and named by its bytes);
- plain HTTP, which cannot list: info.json, tasks.parquet and stats.json read whole (a GET each; named by their
  bytes, so a server without ETags or Last-Modified cannot hide a change of them), and a HEAD per episodes file
  plus one for the first missing (named by ETag, else Last-Modified; a file with neither is read whole and named
  by its bytes), all asked at once: one round trip for a dataset with one or two episodes files (format/metadata.py
  probe_meta). A build reuses the bytes read here.
A snapshot whose revision no longer matches is never read: the changed dataset has another key and is read anew.
A process keeps the snapshot it last parsed of each dataset (format/metadata.py `Snapshot`, held by
`DerivedCache.open(keep_as=...)` while the folder's files keep their stats): a dataset constructed again from a
source whose revision is unchanged pays finding the revision (the above) and no parse, JSON or pyarrow work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robostream.array_file import read_arrays, write_arrays
from robostream.storage.integrity import FileVersion

SNAPSHOT_KEY = "metadata-v2"  # v2: episode columns in array files


@dataclass(frozen=True)
class MetadataTables:
    """The metadata files as construction uses them: info.json and stats.json as text (parsed, and checked, by
    the caller), the locating columns of each episodes file and the tasks."""

    info_text: str
    episode_parts: list[tuple[dict[str, np.ndarray], str]]  # (columns, file name) per episodes file
    tasks: dict[int, str]
    stats_text: str | None  # None: the dataset has no meta/stats.json


def revision_token(versions: Mapping[str, FileVersion], fetched: Mapping[str, bytes]) -> str:
    """A short hash of the metadata files' versions (relative path -> version): a file read whole (`fetched`) is
    named by the sha256 of its bytes, any other by its size and version token."""
    doc = sorted(
        (path, v.size, f"sha256:{hashlib.sha256(fetched[path]).hexdigest()}" if path in fetched else v.token)
        for path, v in versions.items()
    )
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def snapshot_identity(location: str, revision: str) -> str:
    """The derived-cache key of a dataset's metadata at one revision."""
    return f"{SNAPSHOT_KEY}|{location}|{revision}"


def save_tables(tables: MetadataTables, folder: Path) -> None:
    """Two reads per source when loaded: the small files in one JSON document, and each episodes file's columns
    in an array file (array_file.py: sources are opened in threads, which .npy files cannot be)."""
    files = []
    for i, (part, name) in enumerate(tables.episode_parts):
        rows = {len(values) for values in part.values()}
        if len(rows) > 1:
            raise ValueError(f"{name}: episode columns of different lengths {sorted(rows)}")
        write_arrays(folder / f"episodes-{i}.arrays", part)
        files.append(name)
    doc = {
        "info": tables.info_text,
        "stats": tables.stats_text,
        "tasks": {str(k): v for k, v in tables.tasks.items()},
        "episode_files": files,
    }
    (folder / "metadata.json").write_text(json.dumps(doc), encoding="utf-8")


def load_tables(folder: Path) -> MetadataTables:
    doc = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    parts = []
    for i, name in enumerate(doc["episode_files"]):
        part = read_arrays(folder / f"episodes-{i}.arrays")
        rows = {values.shape[0] if values.ndim else -1 for values in part.values()}
        if len(rows) > 1 or -1 in rows:
            raise ValueError(f"{folder / f'episodes-{i}.arrays'}: episode columns of different lengths")
        parts.append((part, name))
    return MetadataTables(
        info_text=doc["info"],
        episode_parts=parts,
        tasks={int(k): v for k, v in doc["tasks"].items()},
        stats_text=doc["stats"],
    )
