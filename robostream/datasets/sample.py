"""Turning one episode's data rows plus decoded camera frames into a sample with lerobot's contract.

Shared by the map-style and the streaming dataset so that both produce identical samples for the same index.
Everything here works in frames within the episode (row i of `EpisodeRows` is frame i).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from robostream.datasets.sample_keys import TASK, feature_keys, key_order, pad_key
from robostream.format.data_rows import EpisodeRows
from robostream.format.language import language_cell
from robostream.format.metadata import DatasetMetadata
from robostream.plan.windows import window_indices

Windows = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # per windowed key: frames to read, padding mask


def decode_png(cell: Mapping[str, Any]) -> torch.Tensor:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(cell["bytes"])).convert("RGB"))
    return torch.from_numpy(image.copy()).permute(2, 0, 1)


def stack_window(frames: Sequence[torch.Tensor]) -> torch.Tensor:
    """(T, C, H, W) from T decoded frames; one frame stays a view (the DataLoader's collate copies it anyway)."""
    return frames[0].unsqueeze(0) if len(frames) == 1 else torch.stack(list(frames))


class SampleAssembler:
    """Knows the windows of a frame and builds the sample once the video frames are decoded."""

    def __init__(
        self,
        meta: DatasetMetadata,
        delta_offsets: Mapping[str, np.ndarray],
        return_uint8: bool,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None,
    ) -> None:
        self.meta = meta
        self.delta_offsets = dict(delta_offsets)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.keys = feature_keys(meta, {k: len(v) for k, v in self.delta_offsets.items()})
        self.order = key_order(self.keys)  # the batch path and mixtures follow it too

    def windows(self, frame: int, length: int) -> Windows:
        """Per windowed key the (clamped) frames to read and the padding mask, in an episode of `length`."""
        frames, pads = {}, {}
        for key, offsets in self.delta_offsets.items():
            frames[key], pads[key] = window_indices(frame, 0, length, offsets)
        return frames, pads

    def video_frames(self, frame: int, query_frames: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Frames each camera needs for this sample (the frame itself without a window)."""
        return {k: query_frames.get(k, np.array([frame])) for k in self.meta.video_keys}

    @staticmethod
    def timestamps(rows: EpisodeRows, frames: np.ndarray) -> np.ndarray:
        return rows.columns["timestamp"][frames].astype(np.float64)

    def assemble(
        self, rows: EpisodeRows, frame: int, video_frames: Mapping[str, torch.Tensor], windows: Windows | None = None
    ) -> dict[str, Any]:
        """The sample of `frame`; video_frames holds per camera uint8 (T, C, H, W) for the frames of `video_frames`
        (depth cameras: float32 depths, see datasets/cameras.py)."""
        query, pads = self.windows(frame, len(rows)) if windows is None else windows
        item: dict[str, Any] = {pad_key(key): torch.from_numpy(pad) for key, pad in pads.items()}
        for key, values in rows.columns.items():
            item[key] = torch.from_numpy(np.array(values[query[key]] if key in query else values[frame]))
        for key, strings in rows.strings.items():
            item[key] = strings[frame]
        for key, cells in rows.language.items():
            item[key] = language_cell(cells[frame], key)
        for key, cells in rows.images.items():
            images = torch.stack([decode_png(cells[int(f)].as_py()) for f in query.get(key, [frame])])
            item[key] = self._finish_camera(key, images, squeeze=key not in query)
        for key, decoded in video_frames.items():
            item[key] = self._finish_camera(key, decoded, squeeze=decoded.shape[0] == 1)
        item[TASK] = self.meta.task(int(rows.columns["task_index"][frame]))
        return {key: item[key] for key in self.order}

    def _finish_camera(self, key: str, frames: torch.Tensor, squeeze: bool) -> torch.Tensor:
        """uint8 (T, C, H, W) -> float in [0, 1] unless return_uint8, then image_transforms. A depth camera's
        frames are already float32 depths: kept as they are, and not transformed (as lerobot does).

        lerobot squeezes a video window of one frame to (C, H, W) (also a one-element delta list), while parquet
        images are only unstacked when the key has no deltas; `squeeze` says which applies.
        """
        depth = key in self.meta.depth_codings
        if not self.return_uint8 and not depth:
            frames = unit_float(frames)
        if squeeze:
            frames = frames.squeeze(0)
        if self.image_transforms is not None and not depth:
            frames = self.image_transforms(frames)
        return frames


def unit_float(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1], the values of lerobot's `frames.to(float32) / 255.0` (a true float32
    division either way). CPU frames by numpy: torch would split each sample's conversion over its intra-op threads,
    which in the training process (num_workers=0) wait for cores the decode threads hold (see batch_assembly.py's
    _copy_window)."""
    if frames.device.type != "cpu":
        return frames.to(torch.float32) / 255.0
    return torch.from_numpy(np.divide(frames.numpy(), np.float32(255.0), dtype=np.float32))
