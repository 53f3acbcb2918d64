"""A v3.0 dataset writer whose output `lerobot` reads back.

Layout and rules follow lerobot: data parquet files and each camera's mp4 files roll over by size independently;
each episode is encoded alone and appended to its camera's current mp4 by stream copy; the episodes table records
every episode's files and its from/to timestamps inside each mp4; tasks.parquet and an aggregated stats.json are
written at the end.

Everything is written into a staging folder beside the root and moved into place by `finalize()`, so an
interrupted write leaves the previous state of `root` intact (and no partial dataset that looks complete).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.format.info import CAMERA_OR_TEXT_DTYPES, CODEBASE_VERSION, DEFAULT_FEATURES, DatasetInfo
from robostream.format.language import LANGUAGE_DTYPE, language_array, language_arrow_type
from robostream.format.metadata import INFO_PATH, STATS_PATH, TASKS_PATH
from robostream.format.paths import (
    DEFAULT_DATA_PATH,
    DEFAULT_EPISODES_PATH,
    DEFAULT_VIDEO_PATH,
    render_template,
)
from robostream.format.stats import (
    aggregate_stats,
    feature_stats,
    frame_stats,
    image_stats,
    stats_to_json,
)
from robostream.format.tasks import write_tasks
from robostream.video.encode import concat_videos, encode_depth_video, encode_video
from robostream.writer.depth import DEPTH_CRF, DEPTH_GOP, depth_codes, depth_info, depth_keys
from robostream.writer.staging import StagedWriter

MB = 1024 * 1024
IMAGE_STATS_MAX_FRAMES = 32  # frames sampled per episode for camera stats


def arrow_type(feature: Mapping[str, Any]) -> pa.DataType:
    """Arrow type lerobot/HF datasets use for a feature: scalars for shape [1], fixed-size lists otherwise."""
    if feature["dtype"] == "image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if feature["dtype"] == "string":
        return pa.string()
    value_type = pa.from_numpy_dtype(np.dtype(feature["dtype"]))
    shape = list(feature["shape"])
    if shape == [1]:
        return value_type
    for size in reversed(shape):
        value_type = pa.list_(value_type, int(size))
    return value_type


def column_array(values: np.ndarray, feature: Mapping[str, Any]) -> pa.Array:
    typ = arrow_type(feature)
    if feature["dtype"] == "string":
        return pa.array([str(v) for v in np.asarray(values).reshape(-1)], type=typ)
    values = np.asarray(values)
    if list(feature["shape"]) == [1]:
        return pa.array(values.reshape(len(values)).astype(feature["dtype"]), type=typ)
    flat = pa.array(values.astype(feature["dtype"]).reshape(-1))
    for size in reversed(feature["shape"]):
        flat = pa.FixedSizeListArray.from_arrays(flat, int(size))
    return flat


def episode_columns(
    frames: Mapping[str, Any], *, fps: float, episode: int, first_index: int, task_index: np.ndarray
) -> dict[str, Any]:
    """An episode's columns: the user's frames plus those every data file has (timestamp, frame_index,
    episode_index, the dataset-wide index starting at `first_index`, task_index), one row per task index."""
    length = len(task_index)
    return {
        **frames,
        "timestamp": (np.arange(length) / fps).astype(np.float32),
        "frame_index": np.arange(length, dtype=np.int64),
        "episode_index": np.full(length, episode, dtype=np.int64),
        "index": np.arange(first_index, first_index + length, dtype=np.int64),
        "task_index": task_index,
    }


def png_column(frames: np.ndarray) -> pa.Array:
    from PIL import Image

    blobs = []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="PNG")
        blobs.append({"bytes": buf.getvalue(), "path": None})
    return pa.array(blobs, type=arrow_type({"dtype": "image"}))


@dataclass
class _RollingFile:
    """chunk/file index of the file being filled, and how full it is."""

    chunks_size: int
    chunk_index: int = 0
    file_index: int = 0
    bytes: int = 0
    episodes: int = 0

    def advance(self) -> None:
        self.file_index += 1
        if self.file_index >= self.chunks_size:
            self.chunk_index, self.file_index = self.chunk_index + 1, 0
        self.bytes = self.episodes = 0


@dataclass
class _CameraState:
    file: _RollingFile
    pending: list[Path] = field(default_factory=list)  # episode mp4s that make up the current file
    duration_s: float = 0.0


class DatasetWriter(StagedWriter):
    """Write a LeRobot v3.0 dataset episode by episode.

    `features` are the user features (`observation.state`, `action`, cameras with dtype "video" and shape
    [H, W, 3], depth cameras [H, W, 1] marked `info: {"is_depth_map": true}` (`writer.depth.depth_feature`), ...);
    the default index columns are added. `codec`, `gop`, `crf`, `preset` are the RGB cameras'; depth cameras get
    lerobot 0.6.1's depth encoder and info block. Use as a context manager, or call `finalize()`.
    """

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
        preset: str | int | None = None,
        data_files_size_in_mb: float = 100,
        video_files_size_in_mb: float = 200,
        chunks_size: int = 1000,
        tools: Sequence[Mapping[str, Any]] | None = None,
        overwrite: bool = False,
    ) -> None:
        """`tools`: info.json's "tools" (function schemas, as lerobot-annotate declares with language columns)."""
        depth = depth_keys(features)  # checked before the staging folder is made
        super().__init__(root, fps, features, overwrite=overwrite)
        self.depth_keys = depth  # encoded as lerobot's depth encoder does, not with `codec`
        for feat in self.features.values():
            if feat["dtype"] not in CAMERA_OR_TEXT_DTYPES:
                feat.setdefault("fps", self.fps)
        self.codec, self.gop, self.crf, self.preset = codec, gop, crf, preset
        self.robot_type = robot_type
        self.data_limit = int(data_files_size_in_mb * MB)
        self.video_limit = int(video_files_size_in_mb * MB)
        self.data_files_size_in_mb, self.video_files_size_in_mb = data_files_size_in_mb, video_files_size_in_mb
        self.chunks_size = chunks_size
        self.tools = [dict(tool) for tool in tools] if tools else None
        self.stage.mkdir(parents=True)
        self._episode_tmp = Path(tempfile.mkdtemp(prefix="episodes-", dir=self.stage))
        self._schema = pa.schema(
            [
                (k, language_arrow_type(k) if f["dtype"] == LANGUAGE_DTYPE else arrow_type(f))
                for k, f in self.features.items()
                if f["dtype"] != "video"
            ]
        )
        self._data = _RollingFile(chunks_size)
        self._data_writer: pq.ParquetWriter | None = None
        self._cameras = {k: _CameraState(_RollingFile(chunks_size)) for k in self.video_keys}
        self._episode_rows: list[dict[str, Any]] = []
        self._episode_stats: list[dict[str, dict[str, np.ndarray]]] = []
        self._tasks: dict[str, int] = {}
        self._frames = 0
        self._finalized = False

    # -- episodes --------------------------------------------------------------------------------------------
    def add_episode(
        self,
        frames: Mapping[str, np.ndarray],
        task: str | Sequence[str],
        videos: Mapping[str, np.ndarray] | None = None,
        video_files: Mapping[str, str | Path] | None = None,
        video_stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    ) -> int:
        """Append one episode and return its episode_index.

        frames: per feature an array of T rows (images as uint8 (T, H, W, C); a language column: per frame a list
        of row dicts); task: one string, or one per frame.
        videos: per camera uint8 (T, H, W, 3) frames to encode (a depth camera: float (T, H, W, 1) depths in
        metres, quantised and encoded as lerobot's depth encoder does); or video_files: per camera an already
        encoded mp4 of exactly T frames (encoded with this writer's settings; a depth camera's with
        `encode_depth_video`) to append by stream copy, with optional video_stats (per camera, as `image_stats`
        or, for depth, `frame_stats` returns).
        """
        camera_frames, encoded = dict(videos or {}), {k: Path(v) for k, v in (video_files or {}).items()}
        episode_index = len(self._episode_rows)
        user_keys = [k for k, f in self.features.items() if f["dtype"] != "video" and k not in DEFAULT_FEATURES]
        missing = [k for k in user_keys if k not in frames] + [
            k for k in self.video_keys if k not in camera_frames and k not in encoded
        ]
        if missing:
            raise ValueError(f"episode {episode_index}: missing feature(s) {missing}")
        length = len(frames[user_keys[0]]) if user_keys else len(next(iter(camera_frames.values())))
        if length < 1:
            raise ValueError(f"episode {episode_index}: an episode needs at least one frame")
        tasks = [task] * length if isinstance(task, str) else list(task)
        if len(tasks) != length:
            raise ValueError(f"episode {episode_index}: {len(tasks)} task strings for {length} frames")
        row_counts = {k: len(frames[k]) for k in user_keys} | {k: len(v) for k, v in camera_frames.items()}
        for key, count in row_counts.items():
            if count != length:
                raise ValueError(f"episode {episode_index}: feature {key!r} has {count} rows, expected {length}")
        task_indices = np.array([self._tasks.setdefault(t, len(self._tasks)) for t in tasks], dtype=np.int64)
        columns = episode_columns(
            frames, fps=self.fps, episode=episode_index, first_index=self._frames, task_index=task_indices
        )
        row: dict[str, Any] = {
            "episode_index": episode_index,
            "tasks": list(dict.fromkeys(tasks)),
            "length": length,
            "dataset_from_index": self._frames,
            "dataset_to_index": self._frames + length,
        }
        stats: dict[str, dict[str, np.ndarray]] = {}
        row.update(self._write_data(columns, stats))
        for key in self.video_keys:
            row.update(
                self._append_video(
                    key,
                    episode_index,
                    length,
                    encoded[key] if key in encoded else camera_frames[key],
                    stats,
                    (video_stats or {}).get(key),
                )
            )
        self._frames += length
        self._episode_rows.append(row)
        self._episode_stats.append(stats)
        return episode_index

    def _write_data(self, columns: Mapping[str, np.ndarray], stats: dict) -> dict[str, Any]:
        arrays = []
        for name in self._schema.names:
            feat = self.features[name]
            if feat["dtype"] == "image":
                arrays.append(png_column(np.asarray(columns[name])))
                stats[name] = image_stats(np.asarray(columns[name]))
            elif feat["dtype"] == LANGUAGE_DTYPE:  # no stats, as lerobot
                arrays.append(language_array(list(columns[name]), name))
            else:
                arrays.append(column_array(columns[name], feat))
                if feat["dtype"] != "string":
                    stats[name] = feature_stats(np.asarray(columns[name]).reshape(len(columns[name]), -1))
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        if self._data_writer is not None and self._data.bytes > 0 and self._data.bytes + table.nbytes > self.data_limit:
            self._close_data_file()
            self._data.advance()
        if self._data_writer is None:
            path = self._stage_path(
                DEFAULT_DATA_PATH, chunk_index=self._data.chunk_index, file_index=self._data.file_index
            )
            self._data_writer = pq.ParquetWriter(path, self._schema)
            self._data_path = path
        self._data_writer.write_table(table)  # one row group per episode, as lerobot records them
        self._data.bytes = os.path.getsize(self._data_path)
        return {"data/chunk_index": self._data.chunk_index, "data/file_index": self._data.file_index}

    def _close_data_file(self) -> None:
        if self._data_writer is not None:
            self._data_writer.close()
            self._data_writer = None

    def _append_video(
        self,
        key: str,
        episode_index: int,
        length: int,
        video: np.ndarray | Path,
        stats: dict,
        given_stats: Mapping[str, np.ndarray] | None,
    ) -> dict:
        """Append one episode of camera `key`: `video` is its frames to encode, or an mp4 encoded already."""
        camera = self._cameras[key]
        episode_mp4 = self._episode_tmp / f"{key}-{episode_index:06d}.mp4"
        if isinstance(video, Path):
            shutil.copyfile(video, episode_mp4)
            if given_stats is not None:
                stats[key] = {k: np.asarray(v) for k, v in given_stats.items()}
        else:
            stats[key] = self._encode(key, episode_index, video, episode_mp4)
        size = episode_mp4.stat().st_size
        if camera.pending and camera.file.bytes + size > self.video_limit:
            self._flush_video(key)
            camera.file.advance()
        from_ts = camera.duration_s
        camera.pending.append(episode_mp4)
        camera.file.bytes += size
        camera.duration_s += length / self.fps
        return {
            f"videos/{key}/chunk_index": camera.file.chunk_index,
            f"videos/{key}/file_index": camera.file.file_index,
            f"videos/{key}/from_timestamp": from_ts,
            f"videos/{key}/to_timestamp": camera.duration_s,
        }

    def _encode(self, key: str, episode_index: int, frames: np.ndarray, path: Path) -> dict[str, np.ndarray]:
        """Encode one episode of camera `key` to `path`; returns its stats (of sampled frames, count all T)."""
        length = len(frames)
        stride = max(1, length // IMAGE_STATS_MAX_FRAMES)
        h, w, c = self.features[key]["shape"]
        if key in self.depth_keys:
            codes = depth_codes(frames, where=f"episode {episode_index} depth camera {key!r}", shape=(h, w))
            encode_depth_video(codes, path, fps=self.fps, gop=DEPTH_GOP, crf=DEPTH_CRF)
            stats = frame_stats(np.asarray(frames)[::stride, ::4, ::4])
        else:
            if frames.shape[1:] != (h, w, c) or frames.dtype != np.uint8:
                raise ValueError(
                    f"episode {episode_index} camera {key!r}: expected uint8 frames (T, {h}, {w}, {c}), "
                    f"got {frames.dtype} {frames.shape}"
                )
            encode_video(frames, path, self.fps, self.codec, self.gop, self.crf, preset=self.preset)
            stats = image_stats(frames[::stride, ::4, ::4])
        stats["count"] = np.array([length], dtype=np.int64)
        return stats

    def _flush_video(self, key: str) -> None:
        camera = self._cameras[key]
        if not camera.pending:
            return
        target = self._stage_path(
            DEFAULT_VIDEO_PATH, video_key=key, chunk_index=camera.file.chunk_index, file_index=camera.file.file_index
        )
        concat_videos(camera.pending, target, self.fps)
        for path in camera.pending:
            path.unlink()
        camera.pending, camera.duration_s = [], 0.0

    def _stage_path(self, template: str, **fields: Any) -> Path:
        path = self.stage / render_template(template, what="writer path", **fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    # -- finishing -------------------------------------------------------------------------------------------
    def finalize(self) -> Path:
        """Write the remaining files and metadata, then move the dataset into `root` atomically."""
        if self._finalized:
            return self.root
        if not self._episode_rows:
            raise ValueError(f"{self.root}: no episodes were added")
        self._close_data_file()
        for key in self.video_keys:
            self._flush_video(key)
        shutil.rmtree(self._episode_tmp)
        self._write_episodes_table()
        write_tasks(self.stage / TASKS_PATH, {i: t for t, i in self._tasks.items()})
        stats = aggregate_stats(self._episode_stats)
        (self.stage / STATS_PATH).write_text(json.dumps(stats_to_json(stats), indent=2))
        (self.stage / INFO_PATH).write_text(json.dumps(self._info().to_json_dict(), indent=2))
        self.move_into_place()
        self._finalized = True
        return self.root

    def _write_episodes_table(self) -> None:
        rows = []
        for row, stats in zip(self._episode_rows, self._episode_stats):
            full = dict(row)
            for feat, feat_stats in stats.items():
                for name, value in feat_stats.items():
                    full[f"stats/{feat}/{name}"] = np.asarray(value).tolist()
            full["meta/episodes/chunk_index"] = 0
            full["meta/episodes/file_index"] = 0
            rows.append(full)
        path = self._stage_path(DEFAULT_EPISODES_PATH, chunk_index=0, file_index=0)
        pq.write_table(pa.Table.from_pylist(rows), path)

    def _info(self) -> DatasetInfo:
        features = {}
        for name, feat in self.features.items():
            feat = dict(feat)
            if name in self.depth_keys:
                h, w, _ = feat["shape"]
                feat.setdefault("names", ["height", "width", "channels"])
                feat["info"] = depth_info(height=h, width=w, fps=self.fps)
            elif feat["dtype"] == "video":
                h, w, c = feat["shape"]
                feat.setdefault("names", ["height", "width", "channels"])
                feat["info"] = {
                    "video.height": h,
                    "video.width": w,
                    "video.codec": self.codec,
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": c,
                    "has_audio": False,
                    "video.g": self.gop,
                    "video.crf": self.crf,
                }
            features[name] = feat
        return DatasetInfo(
            codebase_version=CODEBASE_VERSION,
            fps=self.fps,
            features=features,
            total_episodes=len(self._episode_rows),
            total_frames=self._frames,
            total_tasks=len(self._tasks),
            chunks_size=self.chunks_size,
            data_files_size_in_mb=self.data_files_size_in_mb,
            video_files_size_in_mb=self.video_files_size_in_mb,
            data_path=DEFAULT_DATA_PATH,
            video_path=DEFAULT_VIDEO_PATH if self.video_keys else None,
            robot_type=self.robot_type,
            splits={"train": f"0:{len(self._episode_rows)}"},
            raw={"tools": self.tools} if self.tools else {},
        )

    def abort(self) -> None:
        """Discard everything written so far; `root` is left as it was."""
        self._close_data_file()
        self.remove_stage()
