"""The v2.1 layout (input of the converter): one parquet per episode, one mp4 per episode per camera, JSON-lines
metadata (`episodes.jsonl`, `tasks.jsonl`, `episodes_stats.jsonl`).

Reading is strict: the converter must refuse a dataset whose files and metadata disagree instead of pairing
files with episodes by position the way lerobot's converter does (its `sorted(glob(...))` mispairs past chunk 999
and silently shifts every later episode when one file is missing).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robostream.errors import DatasetFormatError, MissingFileError
from robostream.format.info import check_feature
from robostream.format.paths import render_template
from robostream.numbers import finite_number
from robostream.storage.paths import local_path

V21 = "v2.1"
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
EPISODES_JSONL = "meta/episodes.jsonl"
TASKS_JSONL = "meta/tasks.jsonl"
EPISODES_STATS_JSONL = "meta/episodes_stats.jsonl"
INFO_PATH = "meta/info.json"


def input_file(root: Path, relative: str) -> Path:
    """A file of the v2.1 dataset at `root`, through the one safe-path rule of every reader: a symlink that leads
    out of the dataset (to /etc/passwd, another user's data) is refused, never read and copied into the output."""
    return local_path(root, relative, what=f"{root}/{relative}")


@dataclass(frozen=True)
class V21Episode:
    episode_index: int
    tasks: list[str]
    length: int
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of the episodes.jsonl line, kept as lerobot does


@dataclass(frozen=True)
class V21Layout:
    """Where a v2.1 dataset at `root` keeps each episode's files (from info.json alone)."""

    root: Path
    info: dict[str, Any]

    @property
    def chunks_size(self) -> int:
        return int(self.info.get("chunks_size", 1000))

    @property
    def video_keys(self) -> list[str]:
        """Cameras stored as mp4, sorted by name (the order lerobot's converter writes them in)."""
        return sorted(k for k, f in self.info["features"].items() if f.get("dtype") == "video")

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.info["features"].items() if f.get("dtype") == "image"]

    def path(self, relative: str) -> Path:
        """The checked local path of one of the dataset's files (see `input_file`)."""
        return input_file(self.root, relative)

    def data_file(self, episode_index: int) -> str:
        return render_template(
            self.info.get("data_path") or V21_DATA_PATH,
            what=f"{self.root}/{INFO_PATH} data_path",
            episode_chunk=episode_index // self.chunks_size,
            episode_index=episode_index,
        )

    def video_file(self, episode_index: int, video_key: str) -> str:
        template = self.info.get("video_path") or V21_VIDEO_PATH
        return render_template(
            template,
            what=f"{self.root}/{INFO_PATH} video_path",
            video_key=video_key,
            episode_chunk=episode_index // self.chunks_size,
            episode_index=episode_index,
        )


@dataclass(frozen=True)
class V21Dataset(V21Layout):
    """The metadata of a v2.1 dataset (nothing under data/ or videos/ is read)."""

    episodes: list[V21Episode]  # sorted by episode_index
    tasks: dict[int, str]  # task_index -> task, sorted by task_index


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise MissingFileError(
            f"{path}: missing; a v2.1 dataset needs meta/info.json, episodes.jsonl, tasks.jsonl "
            "and episodes_stats.jsonl"
        )
    rows = []
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(f"{path}:{number}: not a JSON line: {exc}") from exc
            if not isinstance(row, dict):
                raise DatasetFormatError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def _int_field(row: dict[str, Any], key: str, where: str) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DatasetFormatError(f"{where}: {key!r} must be an integer, got {value!r}")
    return value


def read_info_v21(root: Path) -> dict[str, Any]:
    """info.json of a dataset that must be v2.1; other versions and non-datasets are refused by name."""
    path = input_file(root, INFO_PATH)
    if not path.is_file():
        raise MissingFileError(f"{path}: missing; {root} is not a LeRobot dataset (expected meta/info.json)")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetFormatError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise DatasetFormatError(f"{path}: not a LeRobot info.json (no 'features' object)")
    version = info.get("codebase_version")
    if version != V21:
        hint = " (already converted)" if isinstance(version, str) and version.startswith("v3.") else ""
        raise DatasetFormatError(f"{path}: codebase_version is {version!r}{hint}; the converter takes v2.1 datasets")
    finite_number(info.get("fps"), what=f"{path} 'fps'", positive=True, error=DatasetFormatError)
    for name, feature in info["features"].items():
        check_feature(name, feature, str(path))
    return info


def read_v21(root: str | Path) -> V21Dataset:
    """Read and cross-check a v2.1 dataset's metadata files."""
    root = Path(root)
    info = read_info_v21(root)
    episodes_path, tasks_path = input_file(root, EPISODES_JSONL), input_file(root, TASKS_JSONL)
    episodes = []
    for row in _read_jsonl(episodes_path):
        where = f"{episodes_path} (episode {row.get('episode_index')!r})"
        index, length = _int_field(row, "episode_index", where), _int_field(row, "length", where)
        episode_tasks = row.get("tasks")
        if not isinstance(episode_tasks, list) or not all(isinstance(t, str) for t in episode_tasks):
            raise DatasetFormatError(f"{where}: 'tasks' must be a list of strings, got {episode_tasks!r}")
        extra = {k: v for k, v in row.items() if k not in ("episode_index", "tasks", "length")}
        episodes.append(V21Episode(index, episode_tasks, length, extra))
    episodes.sort(key=lambda e: e.episode_index)
    indices = [e.episode_index for e in episodes]
    if indices != list(range(len(indices))):
        dupes = sorted(i for i, n in Counter(indices).items() if n > 1)
        gaps = sorted(set(range(max(indices, default=-1) + 1)) - set(indices))
        raise DatasetFormatError(
            f"{episodes_path}: episode indices must be 0..N-1 without gaps or repeats; "
            f"missing {gaps[:10]}, repeated {dupes[:10]}"
        )
    tasks_rows = _read_jsonl(tasks_path)
    tasks: dict[int, str] = {}
    for row in sorted(tasks_rows, key=lambda r: r.get("task_index", -1)):
        index = _int_field(row, "task_index", str(tasks_path))
        if not isinstance(row.get("task"), str):
            raise DatasetFormatError(f"{tasks_path}: task_index {index}: 'task' must be a string")
        tasks[index] = row["task"]
    known = set(tasks.values())
    for episode in episodes:
        unknown = [t for t in episode.tasks if t not in known]
        if unknown:
            raise DatasetFormatError(
                f"{episodes_path}: episode {episode.episode_index} names task(s) {unknown} "
                f"that {tasks_path} does not list"
            )
    declared = info.get("total_episodes")
    if declared != len(episodes):
        raise DatasetFormatError(
            f"{root / INFO_PATH}: total_episodes is {declared!r} but {episodes_path} lists {len(episodes)} episodes"
        )
    return V21Dataset(root, info, episodes, tasks)


STATS_BATCH = 4096  # episodes whose stats are held as Python objects before becoming arrays


def read_episode_stats(root: str | Path, episodes: int) -> dict[str, dict[str, np.ndarray]]:
    """`meta/episodes_stats.jsonl` as stacked arrays {feature: {stat: (episodes, *shape)}} in episode order, keys in
    the file's order (lerobot's episodes-table column order); streamed, so memory is the arrays, not JSON objects.

    Every episode 0..episodes-1 must have stats with the same features, stats and shapes."""
    path = input_file(Path(root), EPISODES_STATS_JSONL)
    if not path.is_file():
        raise MissingFileError(f"{path}: missing; a v2.1 dataset needs meta/episodes_stats.jsonl")
    keys: list[tuple[str, str]] | None = None
    pending: dict[tuple[str, str], list[Any]] = {}
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    order: list[int] = []

    def flush() -> None:
        for key, values in pending.items():
            try:
                array = np.array(values)
            except ValueError as exc:  # ragged nested lists
                raise DatasetFormatError(f"{path}: stats {key[0]}/{key[1]} change shape between episodes: {exc}")
            if array.dtype.kind not in "biuf":
                raise DatasetFormatError(f"{path}: stats {key[0]}/{key[1]} hold values that are not numbers")
            parts.setdefault(key, []).append(array)
            values.clear()

    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            episode = _int_field(row, "episode_index", f"{path}:{number}")
            stats = row.get("stats")
            if not isinstance(stats, dict):
                raise DatasetFormatError(f"{path}:{number}: episode {episode}: 'stats' must be an object")
            found = [(f, k) for f, fs in stats.items() for k in fs]
            if keys is None:
                keys = found
                pending = {key: [] for key in keys}
            elif found != keys:
                raise DatasetFormatError(
                    f"{path}:{number}: episode {episode} has stats {sorted(found)[:6]}..., the "
                    f"first episode {sorted(keys)[:6]}...; every episode needs the same stats"
                )
            for feature, stat in keys:
                pending[(feature, stat)].append(stats[feature][stat])
            order.append(episode)
            if len(order) % STATS_BATCH == 0:
                flush()
    flush()
    if sorted(order) != list(range(episodes)):
        missing = sorted(set(range(episodes)) - set(order))
        raise DatasetFormatError(
            f"{path}: stats for {len(order)} episodes, the dataset has {episodes}; episodes "
            f"without stats: {missing[:10]}"
        )
    rank = np.argsort(np.asarray(order), kind="stable")
    out: dict[str, dict[str, np.ndarray]] = {}
    for feature, stat in keys or []:
        stacked = np.concatenate(parts[(feature, stat)])
        if stacked.ndim == 1:  # scalars: lerobot casts each with np.atleast_1d
            stacked = stacked[:, None]
        out.setdefault(feature, {})[stat] = stacked if order == sorted(order) else stacked[rank]
    return out


def read_layout(root: str | Path) -> V21Layout:
    """The file layout of the v2.1 dataset at `root`, from its info.json."""
    return V21Layout(Path(root), read_info_v21(Path(root)))
