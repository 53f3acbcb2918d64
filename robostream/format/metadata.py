"""A dataset's metadata as one object: info.json + episodes table + tasks + stats, and the file each episode uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robostream.errors import DatasetFormatError, UnsupportedVersionError
from robostream.format.episodes import EpisodeTable, read_episode_table
from robostream.format.info import CONVERT_HINT, DatasetInfo, loads_info
from robostream.format.paths import local_path, render_template
from robostream.format.stats import stats_from_json
from robostream.format.tasks import read_tasks

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"


@dataclass(frozen=True)
class DatasetMetadata:
    """Everything about a dataset except the frames themselves."""

    root: Path
    info: DatasetInfo
    episodes: EpisodeTable
    tasks: dict[int, str]
    stats: dict[str, dict[str, np.ndarray]]

    @property
    def fps(self) -> int:
        return self.info.fps

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

    @property
    def camera_keys(self) -> list[str]:
        return self.info.camera_keys

    def data_file(self, episode_index: int) -> str:
        """Relative path of the data parquet holding an episode."""
        row = self.episodes.row_of(episode_index)
        return render_template(
            self.info.data_path, what=f"data_path of episode {episode_index}",
            chunk_index=int(self.episodes.data_chunk[row]), file_index=int(self.episodes.data_file[row]),
            episode_chunk=int(self.episodes.data_chunk[row]), episode_index=episode_index,
        )

    def video_file(self, episode_index: int, video_key: str) -> str:
        """Relative path of the mp4 holding one camera of an episode."""
        if self.info.video_path is None:
            raise DatasetFormatError(f"{self.root / INFO_PATH}: video_path is null but {video_key!r} is a video")
        span = self.episodes.video_span(episode_index, video_key)
        return render_template(
            self.info.video_path, what=f"video_path of episode {episode_index} camera {video_key!r}",
            video_key=video_key, chunk_index=span.chunk_index, file_index=span.file_index,
            episode_chunk=span.chunk_index, episode_index=episode_index,
        )

    def local(self, relative: str, what: str) -> Path:
        return local_path(self.root, relative, what=what)

    def task(self, task_index: int) -> str:
        try:
            return self.tasks[int(task_index)]
        except KeyError:
            raise DatasetFormatError(
                f"{self.root / TASKS_PATH}: task_index {task_index} is used by the data but not defined"
            ) from None


def read_info(root: Path) -> DatasetInfo:
    path = root / INFO_PATH
    if not path.is_file():
        if (root / "meta" / "episodes.jsonl").is_file():
            raise UnsupportedVersionError(f"{root}: this is a v2.x dataset (meta/episodes.jsonl); {CONVERT_HINT}")
        raise DatasetFormatError(
            f"{path}: not found; is {root} a LeRobot dataset root (it should contain meta/info.json)?")
    return loads_info(path.read_text(encoding="utf-8"), str(path))


def load_metadata(root: str | Path) -> DatasetMetadata:
    """Read a local v3.0 dataset's metadata; every error names the file at fault."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: dataset root does not exist or is not a directory")
    info = read_info(root)
    episode_files = sorted((root / EPISODES_DIR).glob("chunk-*/file-*.parquet"))
    if not episode_files:
        raise DatasetFormatError(f"{root / EPISODES_DIR}: no chunk-*/file-*.parquet episode metadata found")
    episodes = read_episode_table(episode_files, info.video_keys)
    tasks = read_tasks(root / TASKS_PATH)
    stats: dict[str, Any] = {}
    stats_path = root / STATS_PATH
    if stats_path.is_file():
        try:
            stats = stats_from_json(json.loads(stats_path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(f"{stats_path}: malformed JSON at line {exc.lineno}: {exc.msg}") from exc
    return DatasetMetadata(root=root, info=info, episodes=episodes, tasks=tasks, stats=stats)
