"""Map-style LeRobotDataset over a local root, returning exactly the samples `lerobot` returns.

Sample contract (lerobot 0.4+, v3.0): every parquet column as a tensor (scalars 0-d), each camera as float32 CHW in
[0, 1] (uint8 with `return_uint8=True`), `task` as a string; with `delta_timestamps` each listed key is stacked to
(T, ...) over clamp(i + offset, from, to - 1) with `<key>_is_pad`. Like lerobot, a camera window of length 1 is
squeezed to (C, H, W).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from robostream.datasets.cameras import CameraReader
from robostream.datasets.frames import FrameTable, load_frame_table
from robostream.datasets.sample import SampleAssembler
from robostream.datasets.source import open_dataset, resolve_episodes
from robostream.plan.windows import delta_offsets
from robostream.storage.retry import RetryPolicy
from robostream.storage.source import DEFAULT_BLOCK_BUDGET


class LeRobotDataset(torch.utils.data.Dataset):
    """Random access to the frames of a local LeRobot v3.0 dataset, with lerobot's sample contract."""

    def __init__(self, repo_id: str | None = None, root: str | Path | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None, return_uint8: bool = False,
                 video_backend: str | None = None, video_decode_device: str = "cpu",
                 video_decoder_cache_size: int | None = None,
                 revision: str | None = None, storage_options: dict[str, Any] | None = None,
                 data_files_root: str | Path | None = None, retry: RetryPolicy | None = None,
                 cache_dir: str | Path | None = None, cache_limit: int | str | None = None,
                 read_buffer: int | str = DEFAULT_BLOCK_BUDGET) -> None:
        self.repo_id = repo_id
        self.meta = open_dataset(repo_id, root, video_backend, "LeRobotDataset", revision,
                                 storage_options, data_files_root, retry, cache_dir, cache_limit,
                                 read_buffer)
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
        self.assembler = SampleAssembler(self.meta, self.frames, self.delta_offsets, return_uint8, image_transforms)

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
        windows = self.assembler.query_rows(row)
        episode = int(self.frames.columns["episode_index"][row])
        wanted = {k: self.assembler.timestamps(rows) for k, rows in self.assembler.video_rows(row, windows[0]).items()}
        video = self.cameras.decode_many(episode, wanted) if wanted else {}
        return self.assembler.assemble(row, video, windows)
