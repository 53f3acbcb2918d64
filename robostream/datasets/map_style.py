"""Map-style LeRobotDataset over a local root, returning exactly the samples `lerobot` returns.

Sample contract (lerobot 0.4+, v3.0): every parquet column as a tensor (scalars 0-d), each camera as float32 CHW in
[0, 1] (uint8 with `return_uint8=True`), `task` as a string; with `delta_timestamps` each listed key is stacked to
(T, ...) over clamp(i + offset, from, to - 1) with `<key>_is_pad`. Like lerobot, a camera window of length 1 is
squeezed to (C, H, W).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robostream.datasets.cameras import CameraReader
from robostream.datasets.frames import FrameTable, load_frame_table
from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.plan.windows import delta_offsets, window_indices
from robostream.video.decoder import BACKENDS


def default_root(repo_id: str) -> Path:
    """Where lerobot keeps a downloaded dataset: $HF_LEROBOT_HOME/<repo_id> (default ~/.cache/huggingface/lerobot)."""
    home = os.environ.get("HF_LEROBOT_HOME") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "lerobot"
    return Path(home).expanduser() / repo_id


def resolve_episodes(meta: DatasetMetadata, episodes: Sequence[int] | None) -> list[int]:
    """The selected episode indices, sorted and checked against the dataset."""
    available = meta.episodes.episode_index
    if episodes is None:
        return [int(e) for e in available]
    chosen = sorted({int(e) for e in episodes})
    unknown = [e for e in chosen if e not in set(available.tolist())]
    if unknown:
        raise ValueError(f"episodes={unknown[:10]} not in {meta.root} (it has episodes 0..{len(available) - 1})")
    if not chosen:
        raise ValueError("episodes= selects no episode")
    return chosen


def _decode_png(cell: Mapping[str, Any]) -> torch.Tensor:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(cell["bytes"])).convert("RGB"))
    return torch.from_numpy(image.copy()).permute(2, 0, 1)


class LeRobotDataset(torch.utils.data.Dataset):
    """Random access to the frames of a local LeRobot v3.0 dataset, with lerobot's sample contract."""

    def __init__(self, repo_id: str | None = None, root: str | Path | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None, return_uint8: bool = False,
                 video_backend: str | None = None, video_decode_device: str = "cpu",
                 video_decoder_cache_size: int | None = None) -> None:
        if root is None:
            if repo_id is None:
                raise ValueError("LeRobotDataset needs root= (a local dataset folder) or repo_id=")
            root = default_root(repo_id)
        if video_backend not in (None, *BACKENDS):
            raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
        self.repo_id = repo_id
        self.meta = load_metadata(root)
        self.root = self.meta.root
        self.episodes = resolve_episodes(self.meta, episodes)
        self.tolerance_s = tolerance_s
        self.image_transforms = image_transforms
        self.return_uint8 = return_uint8
        self.delta_timestamps = dict(delta_timestamps or {})
        self.delta_offsets = delta_offsets(self.delta_timestamps, self.meta.fps, tolerance_s,
                                           list(self.meta.info.features)) if delta_timestamps else {}
        self.frames: FrameTable = load_frame_table(self.meta, self.episodes)
        self.cameras = CameraReader(self.meta, tolerance_s, video_backend, video_decode_device,
                                    video_decoder_cache_size)

    # -- lerobot-compatible accessors --------------------------------------------------------------------------
    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.meta.info.features

    @property
    def camera_keys(self) -> list[str]:
        return self.meta.camera_keys

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def __len__(self) -> int:
        return len(self.frames)

    def video_decoder_cache_stats(self) -> dict[str, float | int]:
        """This process's decoder-cache statistics (each DataLoader worker has its own)."""
        return self.cameras.cache.stats()

    # -- samples ---------------------------------------------------------------------------------------------
    def __getitem__(self, position: int) -> dict[str, Any]:
        n = len(self.frames)
        if not -n <= position < n:
            raise IndexError(f"index {position} out of range for a dataset of {n} frames")
        row = int(position) % n
        columns = self.frames.columns
        episode = int(columns["episode_index"][row])
        ep_row = self.meta.episodes.row_of(episode)
        ep_from, ep_to = int(self.meta.episodes.from_index[ep_row]), int(self.meta.episodes.to_index[ep_row])
        index = int(columns["index"][row])
        first_row = self.frames.episode_first_row[episode]

        def rows_of(global_indices: np.ndarray) -> np.ndarray:
            return first_row + (global_indices - ep_from)

        item: dict[str, Any] = {}
        query_rows: dict[str, np.ndarray] = {}
        for key, offsets in self.delta_offsets.items():
            query, is_pad = window_indices(index, ep_from, ep_to, offsets)
            query_rows[key] = rows_of(query)
            item[f"{key}_is_pad"] = torch.from_numpy(is_pad)
        for key, values in columns.items():
            item[key] = torch.from_numpy(np.array(values[query_rows[key]] if key in query_rows else values[row]))
        for key, values in self.frames.strings.items():
            item[key] = values[row]
        for key, cells in self.frames.images.items():
            rows = query_rows.get(key, np.array([row]))
            frames = torch.stack([_decode_png(cells[int(r)].as_py()) for r in rows])
            item[key] = self._finish_camera(frames, squeeze=key not in query_rows)
        if self.meta.video_keys:
            timestamps = columns["timestamp"]
            wanted = {k: timestamps[query_rows.get(k, np.array([row]))].astype(np.float64) for k in self.meta.video_keys}
            for key, frames in self.cameras.decode_many(episode, wanted).items():
                item[key] = self._finish_camera(frames, squeeze=frames.shape[0] == 1)
        item["task"] = self.meta.task(int(columns["task_index"][row]))
        return item

    def _finish_camera(self, frames: torch.Tensor, squeeze: bool) -> torch.Tensor:
        """uint8 (T, C, H, W) -> float in [0, 1] unless return_uint8.

        lerobot squeezes a video window of one frame to (C, H, W) (also a one-element delta list), while parquet
        images are only unstacked when the key has no deltas; `squeeze` says which applies.
        """
        if not self.return_uint8:
            frames = frames.to(torch.float32) / 255.0
        if squeeze:
            frames = frames.squeeze(0)
        if self.image_transforms is not None:
            frames = self.image_transforms(frames)
        return frames
