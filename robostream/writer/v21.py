"""Writes v2.1 datasets (one parquet per episode, one mp4 per episode per camera, JSON-lines metadata), the layout
lerobot 0.3.x records: the converter's input in tests and benchmarks.

Like lerobot's recorder, episode tables are written with fixed-size list columns and a `huggingface` features
entry in the parquet schema metadata, and per-episode stats carry min/max/mean/std/count only. Everything is
written into a staging folder and renamed into place at the end.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.format.info import DEFAULT_FEATURES
from robostream.format.stats import feature_stats, stats_to_json
from robostream.format.v21 import (
    EPISODES_JSONL,
    EPISODES_STATS_JSONL,
    INFO_PATH,
    TASKS_JSONL,
    V21,
    V21_DATA_PATH,
    V21_VIDEO_PATH,
)
from robostream.writer.depth import DEPTH_BLOCKS, DepthBlock, depth_keys, legacy_depth_info
from robostream.writer.staging import StagedWriter
from robostream.writer.v30 import arrow_type, column_array, episode_columns, png_column

V21_STATS = ("min", "max", "mean", "std", "count")


def _hf_feature(feature: Mapping[str, Any]) -> dict[str, Any]:
    """The HF `datasets` feature lerobot 0.3.x declares for a column (recorded in the parquet metadata)."""
    if feature["dtype"] == "image":
        return {"_type": "Image"}
    if feature["dtype"] == "string":
        return {"dtype": "string", "_type": "Value"}
    value: dict[str, Any] = {"dtype": feature["dtype"], "_type": "Value"}
    if list(feature["shape"]) == [1]:
        return value
    for size in reversed(feature["shape"]):
        value = {"feature": value, "length": int(size), "_type": "Sequence"}
    return value


class V21Writer(StagedWriter):
    """Write a v2.1 dataset episode by episode; `add_episode` takes what `DatasetWriter.add_episode` takes
    (videos as already encoded per-episode mp4 files).

    Depth cameras (features marked as `DatasetWriter` takes them, mp4s from `encode_depth_video`) get the legacy
    block `writer.depth.legacy_depth_info` under `depth_block`: "info", or "video_info" (the older key, in place
    of `info`)."""

    def __init__(
        self,
        root: str | Path,
        fps: int,
        features: Mapping[str, Mapping[str, Any]],
        *,
        robot_type: str | None = None,
        codec: str = "av1",
        gop: int = 2,
        crf: int = 30,
        chunks_size: int = 1000,
        depth_block: DepthBlock = "info",
        overwrite: bool = False,
    ) -> None:
        if depth_block not in DEPTH_BLOCKS:
            raise ValueError(f"depth_block={depth_block!r}: choose one of {DEPTH_BLOCKS}")
        depth = depth_keys(features)  # checked before the staging folder is made
        super().__init__(root, fps, features, overwrite=overwrite)
        self.depth_keys, self.depth_block = depth, depth_block
        self.codec, self.gop, self.crf = codec, gop, crf
        self.robot_type, self.chunks_size = robot_type, chunks_size
        (self.stage / "meta").mkdir(parents=True)
        columns = [(k, f) for k, f in self.features.items() if f["dtype"] != "video"]
        hf_features = {"info": {"features": {k: _hf_feature(f) for k, f in columns}}}
        self._schema = pa.schema(
            [(k, arrow_type(f)) for k, f in columns], metadata={b"huggingface": json.dumps(hf_features).encode()}
        )
        self._tasks: dict[str, int] = {}
        self._episodes = 0
        self._frames = 0
        self._meta = {
            name: (self.stage / name).open("w", encoding="utf-8") for name in (EPISODES_JSONL, EPISODES_STATS_JSONL)
        }

    def _path(self, template: str, **fields: Any) -> Path:
        path = self.stage / template.format(episode_chunk=fields["episode_index"] // self.chunks_size, **fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def add_episode(
        self,
        frames: Mapping[str, np.ndarray],
        task: str | Sequence[str],
        *,
        video_files: Mapping[str, str | Path],
        video_stats: Mapping[str, Mapping[str, np.ndarray]],
    ) -> int:
        episode = self._episodes
        user_keys = [k for k, f in self.features.items() if f["dtype"] != "video" and k not in DEFAULT_FEATURES]
        length = len(frames[user_keys[0]])
        tasks = [task] * length if isinstance(task, str) else list(task)
        if len(tasks) != length or any(len(frames[k]) != length for k in user_keys):
            raise ValueError(f"episode {episode}: every feature and the task list need {length} rows")
        task_index = np.array([self._tasks.setdefault(t, len(self._tasks)) for t in tasks], dtype=np.int64)
        columns = episode_columns(
            frames, fps=self.fps, episode=episode, first_index=self._frames, task_index=task_index
        )
        stats: dict[str, dict[str, np.ndarray]] = {}
        arrays = []
        for name in self._schema.names:
            feature = self.features[name]
            if feature["dtype"] == "image":
                arrays.append(png_column(np.asarray(columns[name])))
            else:
                arrays.append(column_array(columns[name], feature))
            if feature["dtype"] not in ("image", "string"):
                values = np.asarray(columns[name]).reshape(length, -1)
                stats[name] = {k: v for k, v in feature_stats(values).items() if k in V21_STATS}
                if np.issubdtype(values.dtype, np.integer):  # lerobot keeps an int column's min/max ints
                    stats[name].update(min=values.min(axis=0), max=values.max(axis=0))
        for key in self.video_keys:
            shutil.copyfile(video_files[key], self._path(V21_VIDEO_PATH, video_key=key, episode_index=episode))
            stats[key] = {k: np.asarray(v) for k, v in video_stats[key].items() if k in V21_STATS}
        pq.write_table(
            pa.Table.from_arrays(arrays, schema=self._schema), self._path(V21_DATA_PATH, episode_index=episode)
        )
        self._meta[EPISODES_JSONL].write(
            json.dumps({"episode_index": episode, "tasks": list(dict.fromkeys(tasks)), "length": length}) + "\n"
        )
        self._meta[EPISODES_STATS_JSONL].write(
            json.dumps({"episode_index": episode, "stats": stats_to_json(stats)}) + "\n"
        )
        self._episodes += 1
        self._frames += length
        return episode

    def finalize(self) -> Path:
        """Write tasks and info.json, then move the dataset into `root` (replacing what was there)."""
        for handle in self._meta.values():
            handle.close()
        with (self.stage / TASKS_JSONL).open("w", encoding="utf-8") as handle:
            for task, index in self._tasks.items():
                handle.write(json.dumps({"task_index": index, "task": task}) + "\n")
        features = {}
        for name, feature in self.features.items():
            feature = dict(feature)
            if name in self.depth_keys:
                h, w, _ = feature["shape"]
                feature.pop("info", None)
                feature[self.depth_block] = legacy_depth_info(height=h, width=w, fps=self.fps)
            elif feature["dtype"] == "video":
                h, w, c = feature["shape"]
                feature["info"] = {
                    "video.height": h,
                    "video.width": w,
                    "video.codec": self.codec,
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": c,
                    "has_audio": False,
                }
            features[name] = feature
        info = {
            "codebase_version": V21,
            "robot_type": self.robot_type,
            "total_episodes": self._episodes,
            "total_frames": self._frames,
            "total_tasks": len(self._tasks),
            "total_videos": self._episodes * len(self.video_keys),
            "total_chunks": -(-self._episodes // self.chunks_size),
            "chunks_size": self.chunks_size,
            "fps": self.fps,
            "splits": {"train": f"0:{self._episodes}"},
            "data_path": V21_DATA_PATH,
            "video_path": V21_VIDEO_PATH if self.video_keys else None,
            "features": features,
        }
        (self.stage / INFO_PATH).write_text(json.dumps(info, indent=4))
        self.move_into_place()
        return self.root

    def abort(self) -> None:
        for handle in self._meta.values():
            handle.close()
        self.remove_stage()
