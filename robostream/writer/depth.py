"""Depth cameras as lerobot 0.6.1 writes them, for both writers.

A depth camera is a `video` feature of shape [H, W, 1] whose `info` marks it (`is_depth_map: true`, as lerobot's
users declare it). Frames are float depths in metres; they are quantised to 12-bit codes with lerobot's default
depth encoder (log codes over 0.01..10 m, shift 3.5 m) and encoded losslessly (x265, gray12le), so the codes
come back exactly. Stats are of the raw float frames, not of the clamped or quantised depths, and are not divided
by 255 (lerobot's dataset_writer/compute_stats): they can lie outside the range a decoded sample can hold.

v3.0 info.json carries lerobot 0.6.1's block (`depth_info`); v2.1 has no depth writer in lerobot, so it carries
the legacy spelling older datasets use (`legacy_depth_info`: `video.is_depth_map` with the parameters), either
under `info` or under the older `video_info` key, which lerobot's converter copies as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from robostream.format.depth import DepthCoding, codes_from_depths, is_depth_feature
from robostream.video.encode import DEPTH_PIX_FMT, DEPTH_X265_PARAMS

# lerobot 0.6.1's DepthEncoderConfig defaults; float input is in metres (configs/video.py:infer_depth_unit).
LEROBOT_DEPTH_CODING = DepthCoding(depth_min=0.01, depth_max=10.0, shift=3.5, use_log=True, recorded_unit="m")
DEPTH_GOP = 2
DEPTH_CRF = 30
DEPTH_CODEC = "hevc"  # the stream's canonical codec name, as lerobot's get_video_info records it

DepthBlock = Literal["info", "video_info"]
DEPTH_BLOCKS: tuple[DepthBlock, ...] = ("info", "video_info")


def depth_feature(*, height: int, width: int) -> dict[str, Any]:
    """A depth camera's feature as a lerobot user declares it (lerobot's hw_to_dataset_features for (H, W, 1))."""
    return {
        "dtype": "video",
        "shape": [height, width, 1],
        "names": ["height", "width", "channels"],
        "info": {"is_depth_map": True},
    }


def depth_keys(features: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The video features marked as depth maps; each must be [H, W, 1].

    Raises:
        ValueError: a depth feature's shape is not [H, W, 1], naming it.
    """
    keys = [k for k, f in features.items() if f["dtype"] == "video" and is_depth_feature(f)]
    for key in keys:
        shape = list(features[key]["shape"])
        if len(shape) != 3 or shape[2] != 1:
            raise ValueError(f"depth feature {key!r}: shape {shape}, expected [height, width, 1]")
    return keys


def depth_info(*, height: int, width: int, fps: int) -> dict[str, Any]:
    """The v3.0 info block lerobot 0.6.1 writes for a depth camera recorded in metres, in its key order."""
    coding = LEROBOT_DEPTH_CODING
    return {
        "is_depth_map": True,
        "depth_unit": coding.recorded_unit,
        "video.height": height,
        "video.width": width,
        "video.codec": DEPTH_CODEC,
        "video.pix_fmt": DEPTH_PIX_FMT,
        "video.fps": fps,
        "video.channels": 1,
        "has_audio": False,
        "video.g": DEPTH_GOP,
        "video.crf": DEPTH_CRF,
        "video.preset": None,
        "video.fast_decode": 0,
        "video.video_backend": "pyav",
        "video.extra_options": {"x265-params": DEPTH_X265_PARAMS},
        "video.depth_min": coding.depth_min,
        "video.depth_max": coding.depth_max,
        "video.shift": coding.shift,
        "video.use_log": coding.use_log,
    }


def legacy_depth_info(*, height: int, width: int, fps: int) -> dict[str, Any]:
    """The legacy (v2.x) block of a depth camera: the v2.1 video keys with `video.is_depth_map` true, then the
    quantisation parameters (no `depth_unit`: it did not exist)."""
    coding = LEROBOT_DEPTH_CODING
    return {
        "video.height": height,
        "video.width": width,
        "video.codec": DEPTH_CODEC,
        "video.pix_fmt": DEPTH_PIX_FMT,
        "video.is_depth_map": True,
        "video.fps": fps,
        "video.channels": 1,
        "has_audio": False,
        "video.depth_min": coding.depth_min,
        "video.depth_max": coding.depth_max,
        "video.shift": coding.shift,
        "video.use_log": coding.use_log,
    }


def depth_codes(frames_m: np.ndarray, *, where: str, shape: tuple[int, int]) -> np.ndarray:
    """uint16 (T, H, W) 12-bit codes of float depth frames (T, H, W, 1) in metres, with lerobot's default coding.

    Raises:
        ValueError: the frames are not floating point or not (T, H, W, 1), naming `where` (episode and camera).
    """
    frames_m = np.asarray(frames_m)
    if not np.issubdtype(frames_m.dtype, np.floating) or frames_m.shape[1:] != (*shape, 1):
        raise ValueError(
            f"{where}: expected float depths in metres (T, {shape[0]}, {shape[1]}, 1), "
            f"got {frames_m.dtype} {frames_m.shape}"
        )
    return codes_from_depths(frames_m[..., 0], LEROBOT_DEPTH_CODING)
