"""A live piece's geometry: the order its samples are read in and the frames each sample needs from each camera.

Computed once per live piece (datasets/epoch_iterator.py) and shared by the frame reader, which decodes the frames,
and the pick read-ahead, which fetches their bytes first: both must agree frame for frame, so neither recomputes it.
Frames are episode-relative (frame 0 is the episode's first); a window reaching past the episode is clamped into it
(the padding mask is the sample's business, plan/windows.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robostream.plan.schedule import piece_sample_order
from robostream.plan.windows import window_indices

NO_WINDOW = np.zeros(1, dtype=np.int64)  # a camera without a window reads the sample's own frame


@dataclass(frozen=True)
class PieceGeometry:
    """sample_frames: (N,) the piece's frames in the order its samples are read.
    camera_frames: per camera, (N, T) the frames sample i needs (its window, clamped into the episode)."""

    sample_frames: np.ndarray
    camera_frames: dict[str, np.ndarray]


def piece_geometry(
    *, first: int, stop: int, stride: int, episode_length: int, camera_offsets: Mapping[str, np.ndarray]
) -> PieceGeometry:
    """The geometry of the piece [first, stop) of an episode of `episode_length` frames.

    Args:
        first, stop: the piece's frames within the episode.
        stride: samples are read by residue class of this stride (plan/schedule.py: piece_sample_order).
        episode_length: the episode's frames (windows are clamped into [0, episode_length)).
        camera_offsets: per camera its window's frame offsets (T,), NO_WINDOW for the sample's frame alone.
    """
    if not 0 <= first <= stop <= episode_length:
        raise ValueError(
            f"piece [{first}, {stop}) does not lie in an episode of {episode_length} frames: the plan and the "
            "episode table disagree"
        )
    # (N,) sample order -> (N, 1) against each camera's (1, T) offsets -> (N, T) clamped frames
    order = piece_sample_order(first, stop, stride)
    column = order[:, None]
    cameras = {
        key: window_indices(column, 0, episode_length, np.asarray(offsets, dtype=np.int64)[None, :])[0]
        for key, offsets in camera_offsets.items()
    }
    return PieceGeometry(order, cameras)
