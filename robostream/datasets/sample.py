"""Turning a frame-table row plus decoded camera frames into a sample with lerobot's contract.

Shared by the map-style and the streaming dataset so that both produce identical samples for the same index.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from robostream.datasets.frames import FrameTable
from robostream.format.metadata import DatasetMetadata
from robostream.plan.windows import window_indices


def _decode_png(cell: Mapping[str, Any]) -> torch.Tensor:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(cell["bytes"])).convert("RGB"))
    return torch.from_numpy(image.copy()).permute(2, 0, 1)


class SampleAssembler:
    """Knows the windows of a row and builds the sample once the video frames are decoded."""

    def __init__(self, meta: DatasetMetadata, frames: FrameTable, delta_offsets: Mapping[str, np.ndarray],
                 return_uint8: bool, image_transforms: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        self.meta = meta
        self.frames = frames
        self.delta_offsets = dict(delta_offsets)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms

    def episode_rows(self, episode: int) -> tuple[int, int]:
        """(first row, number of rows) of an episode in the frame table."""
        row = self.meta.episodes.row_of(episode)
        return self.frames.episode_first_row[episode], int(self.meta.episodes.length[row])

    def query_rows(self, row: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per windowed key the (clamped) rows to read and the padding mask."""
        episode = int(self.frames.columns["episode_index"][row])
        first_row, length = self.episode_rows(episode)
        frame = row - first_row
        rows, pads = {}, {}
        for key, offsets in self.delta_offsets.items():
            frames, pads[key] = window_indices(frame, 0, length, offsets)
            rows[key] = first_row + frames
        return rows, pads

    def video_rows(self, row: int, query_rows: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Rows whose frames each camera needs for this sample (one row without a window)."""
        query_rows = self.query_rows(row)[0] if query_rows is None else query_rows
        return {k: query_rows.get(k, np.array([row])) for k in self.meta.video_keys}

    def camera_window_rows(self, episode: int, frames: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorised `video_rows` for many frames of one episode: per camera an (N, T) array of rows."""
        first_row, length = self.episode_rows(episode)
        frames = np.asarray(frames, dtype=np.int64)[:, None]
        no_window = np.zeros(1, dtype=np.int64)
        return {k: first_row + window_indices(frames, 0, length, self.delta_offsets.get(k, no_window)[None, :])[0]
                for k in self.meta.video_keys}

    def timestamps(self, rows: np.ndarray) -> np.ndarray:
        return self.frames.columns["timestamp"][rows].astype(np.float64)

    def assemble(self, row: int, video_frames: Mapping[str, torch.Tensor],
                 windows: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
        """The sample of `row`; video_frames holds per camera uint8 (T, C, H, W) for the rows of `video_rows`."""
        query_rows, pads = self.query_rows(row) if windows is None else windows
        item: dict[str, Any] = {f"{key}_is_pad": torch.from_numpy(pad) for key, pad in pads.items()}
        for key, values in self.frames.columns.items():
            item[key] = torch.from_numpy(np.array(values[query_rows[key]] if key in query_rows else values[row]))
        for key, values in self.frames.strings.items():
            item[key] = values[row]
        for key, cells in self.frames.images.items():
            rows = query_rows.get(key, np.array([row]))
            images = torch.stack([_decode_png(cells[int(r)].as_py()) for r in rows])
            item[key] = self._finish_camera(images, squeeze=key not in query_rows)
        for key, frames in video_frames.items():
            item[key] = self._finish_camera(frames, squeeze=frames.shape[0] == 1)
        item["task"] = self.meta.task(int(self.frames.columns["task_index"][row]))
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
