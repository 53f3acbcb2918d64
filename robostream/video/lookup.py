"""Timestamp -> frame lookup with the tolerance check lerobot applies.

The frame for time t is index round(t * fps), clamped to the file's frames; the decoded frame's pts must then lie
within `tolerance_s` of t, or the request fails with the file and timestamp named (never a silently wrong frame).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from robostream.errors import FrameToleranceError, VideoDecodeError
from robostream.video.decoder import VideoDecoder


def frame_indices(timestamps_s: Sequence[float] | np.ndarray, fps: float, num_frames: int) -> np.ndarray:
    """Nearest frame index of each timestamp, clamped to [0, num_frames - 1]."""
    indices = np.rint(np.asarray(timestamps_s, dtype=np.float64) * fps).astype(np.int64)
    return np.clip(indices, 0, max(num_frames - 1, 0))


def check_tolerance(
    requested_s: np.ndarray, decoded_s: np.ndarray, tolerance_s: float, path: str, context: str = ""
) -> None:
    """Raise FrameToleranceError naming the first requested time with no frame within tolerance."""
    error = np.abs(np.asarray(requested_s, dtype=np.float64) - decoded_s)
    bad = np.nonzero(~(error < tolerance_s))[0]
    if len(bad):
        i = int(bad[0])
        raise FrameToleranceError(
            f"{path}{context}: no frame within tolerance_s={tolerance_s} of t={requested_s[i]:.6f}s "
            f"(nearest decoded frame at {decoded_s[i]:.6f}s, off by {error[i]:.6f}s; {len(bad)} of {len(error)} "
            f"requested times affected). The video may be shorter than its metadata says or have a different "
            f"frame rate; pass a larger tolerance_s only if you know the timestamps are approximate."
        )


def decode_unique(
    decoder: VideoDecoder, timestamps_s: Sequence[float] | np.ndarray, tolerance_s: float, context: str = ""
) -> tuple[torch.Tensor, np.ndarray]:
    """Each distinct frame once, in file order, and per timestamp the position of its frame among them:
    the frame for timestamps_s[i] is frames[inverse[i]] (as the decoder gives them: uint8 (N, C, H, W), possibly
    a channels-last view, or a gray12 plane's int16 (N, 1, H, W))."""
    requested = np.asarray(timestamps_s, dtype=np.float64)
    indices = frame_indices(requested, decoder.fps, decoder.num_frames)
    unique, inverse = np.unique(indices, return_inverse=True)
    try:
        frames, pts = decoder.get_frames_by_index(unique.tolist())
        check_tolerance(requested, pts[inverse], tolerance_s, decoder.path, context)
    except VideoDecodeError:
        # Frame times off the fps grid (e.g. lerobot-concatenated H.264 with B-frames): find frames by their own
        # pts instead; a time with no frame within tolerance still fails, naming the file and the time.
        unique_times, inverse = np.unique(requested, return_inverse=True)
        frames, pts = decoder.get_frames_near_times(unique_times.tolist())
        check_tolerance(requested, pts[inverse], tolerance_s, decoder.path, context)
    return frames, inverse
