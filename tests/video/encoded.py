"""Small real mp4 files for the decoder and packet-index tests, encoded here with PyAV as lerobot encodes them.

- "depth": HEVC (x265) Main 12, gray12le, lossless, GOP 2: lerobot 0.6.1's DepthEncoderConfig. x265 writes an open
  GOP: frame 0 is an IDR, every other even frame a CRA keyframe, and each odd frame a RASL frame decoded after the
  next CRA (shown before it). "depth_intra": the same, every frame a keyframe.
- "hevc_g2", "hevc_g10": HEVC RGB (yuv420p), open GOP as above, with 1 or several frames led by each CRA.
- "h264_bframes": H.264 with B-frames (closed GOP: reordered, composition offsets, no leading frames);
  "h264_negative_cts": the same with FFmpeg's negative_cts_offsets (a version-1 ctts box, signed offsets).

Frames move a gradient (gray: over all 4096 codes), so that the encoders use B-frames and each frame differs from
its neighbours. x265's lossless=1 is exact for all-intra files only: once it predicts between frames, a few pixels
of some inter frames decode to other codes (FFmpeg 5.1 and 8 alike; more on noisy frames, some on smooth ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

FPS = 10
X265_QUIET = "log-level=error"  # x265 prints its settings to stderr on every open; not part of the coded frames


@dataclass(frozen=True)
class Kind:
    encoder: str
    pix_fmt: str
    gop: int
    options: dict[str, str]
    movflags: str | None = None


KINDS = {
    "depth": Kind("libx265", "gray12le", 2, {"crf": "30", "x265-params": f"lossless=1:{X265_QUIET}"}),
    "depth_intra": Kind("libx265", "gray12le", 1, {"crf": "30", "x265-params": f"lossless=1:{X265_QUIET}"}),
    "hevc_g2": Kind("libx265", "yuv420p", 2, {"x265-params": X265_QUIET}),
    "hevc_g10": Kind("libx265", "yuv420p", 10, {"x265-params": X265_QUIET}),
    "h264_bframes": Kind("libx264", "yuv420p", 10, {"bf": "3"}),
    "h264_negative_cts": Kind("libx264", "yuv420p", 10, {"bf": "3"}, movflags="negative_cts_offsets"),
}


def source_frames(kind: str, count: int, size: int, *, noise: bool = False) -> np.ndarray:
    """The frames a file of `kind` is encoded from: uint16 (N, H, W) codes 0..4095 for gray12le, else uint8
    (N, H, W, 3) RGB. noise: random frames instead (large files: many 64 KiB chunks in a few frames)."""
    gray = KINDS[kind].pix_fmt == "gray12le"
    if noise:
        rng = np.random.default_rng(0)
        if gray:
            return rng.integers(0, 4096, (count, size, size)).astype(np.uint16)
        return rng.integers(0, 256, (count, size, size, 3)).astype(np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    if gray:
        ramp = xx * 2048 // size + yy * 2047 // size
        return np.stack([(ramp + i * 50) % 4096 for i in range(count)]).astype(np.uint16)
    return np.stack(
        [np.stack([(xx * 4 + i * 3) % 256, (yy * 4 + i * 2) % 256, (xx + yy + i * 5) % 256], -1) for i in range(count)]
    ).astype(np.uint8)


def encode(path: Path, kind: str, *, count: int = 30, size: int = 64, noise: bool = False) -> np.ndarray:
    """Write an mp4 of `kind` (see KINDS) at `path`, at FPS frames per second; returns its source frames."""
    spec, frames = KINDS[kind], source_frames(kind, count, size, noise=noise)
    with av.open(str(path), "w", options={"movflags": spec.movflags} if spec.movflags else {}) as container:
        stream = container.add_stream(spec.encoder, FPS, options={"g": str(spec.gop), **spec.options})
        stream.pix_fmt, stream.width, stream.height = spec.pix_fmt, size, size
        stream.time_base = Fraction(1, FPS)
        for i, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="gray12le" if pixels.ndim == 2 else "rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return frames
