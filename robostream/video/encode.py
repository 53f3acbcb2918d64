"""Encoding helpers for the writer and the sample-dataset generator (PyAV with its bundled FFmpeg).

Each episode is encoded alone; a camera's mp4 file is then built by concatenating episode mp4s with stream copy
(no re-encode), with `movflags=faststart` so the index sits at the front and remote readers need one range read
to open a file. This is how lerobot builds v3.0 files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

# SVT-AV1 prints a banner on every encoder open unless told otherwise.
os.environ.setdefault("SVT_LOG", "1")

CODECS = {"av1": "libsvtav1", "h264": "libx264", "hevc": "libx265"}
GRAY12_LEVELS = 1 << 12  # values a 12-bit plane holds
DEPTH_PIX_FMT = "gray12le"  # lerobot's depth pixel format: one 12-bit plane, the codes 0..4095
# lerobot 0.6.1's DepthEncoderConfig: HEVC (x265), lossless, so the 12-bit codes come back exactly.
DEPTH_X265_PARAMS = "lossless=1"
# x265 prints ~25 lines per encoder open to stderr (not through libav's logger): errors only. This changes only
# the settings text x265 records in the stream header, not one packet.
_X265_QUIET = "log-level=error"


def encoder_name(codec: str) -> str:
    """Map a short codec name (av1, h264, hevc) or an FFmpeg encoder name to the encoder PyAV should open."""
    name = CODECS.get(codec, codec)
    if name not in av.codecs_available:
        raise ValueError(
            f"video codec {codec!r}: encoder {name!r} is not in this PyAV build; use one of {sorted(CODECS)}"
        )
    return name


def closed_gop_options(codec: str, *, gop: int, crf: int, preset: str | int | None) -> dict[str, str]:
    """Encoder options for a keyframe exactly every `gop` frames, no B-frames and closed GOPs (no frame refers across
    a keyframe), the layout GPU decoders (NVDEC) seek fastest in: every packet's dts equals its pts.

    Args:
        codec: av1, h264 or hevc (or the encoder's FFmpeg name).
        gop: frames from one keyframe to the next (1: every frame a keyframe).
        crf: the encoder's constant-quality level.
        preset: the encoder's speed preset; None keeps the encoder's default.
    """
    name = encoder_name(codec)
    # scenecut off and min-keyint = keyint: keyframes at exactly every gop frames, never one more in between
    gop_params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=0"
    options = {"g": str(gop), "crf": str(crf), "bf": "0"}
    if name == "libx264":
        options["x264-params"] = gop_params
    elif name == "libx265":
        options["x265-params"] = f"{gop_params}:open-gop=0:{_X265_QUIET}"
    elif name == "libsvtav1":  # AV1 has no B-frames to turn off; irefresh-type 2 makes its keyframes closed
        options["svtav1-params"] = f"keyint={gop}:irefresh-type=2:scd=0"
    if preset is not None:
        options["preset"] = str(preset)
    return options


def open_mp4(path: Path) -> Any:
    """An mp4 container open for writing with its index at the front (`movflags=faststart`, as lerobot writes)."""
    return av.open(str(path), mode="w", format="mp4", options={"movflags": "faststart"})


def encode_video(
    frames: Iterable[np.ndarray],
    path: Path,
    fps: int,
    codec: str = "av1",
    gop: int = 2,
    crf: int = 30,
    pix_fmt: str = "yuv420p",
    preset: str | int | None = None,
) -> int:
    """Encode uint8 RGB frames (H, W, 3) to `path`; returns the number of frames written.

    `gop` is the keyframe interval (lerobot's default is 2, so any frame is at most one frame from a keyframe).
    `preset` is the encoder's own speed preset (SVT-AV1: 0-13, x264: "ultrafast".."placebo"); None keeps the
    encoder default, except x264 which uses "veryfast".
    """
    name = encoder_name(codec)

    def add_stream(container, first: np.ndarray):
        height, width = first.shape[:2]
        stream = container.add_stream(name, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.time_base = Fraction(1, fps)
        stream.codec_context.gop_size = gop
        options = {"crf": str(crf)}
        if preset is not None:
            options["preset"] = str(preset)
        elif name == "libx264":
            options["preset"] = "veryfast"
        stream.options = options
        return stream

    return _encode_frames(frames, path, add_stream, frame_format="rgb24")


def encode_depth_video(codes: Iterable[np.ndarray], path: Path, *, fps: int, gop: int = 2, crf: int = 30) -> int:
    """Encode 12-bit depth codes (uint16 (H, W), 0..4095) to `path` as lerobot 0.6.1's depth encoder does:
    libx265, gray12le, `x265-params lossless=1`, keyframe interval `gop`, `crf` (ignored by lossless x265, but
    lerobot passes it). Returns the number of frames written.

    Raises:
        ValueError: a frame is not a 2-D uint16 array of codes <= 4095, or there are no frames.
    """
    options = {"g": str(gop), "crf": str(crf), "x265-params": f"{DEPTH_X265_PARAMS}:{_X265_QUIET}"}

    def add_stream(container, first: np.ndarray):
        stream = container.add_stream(encoder_name("hevc"), rate=fps, options=options)
        stream.height, stream.width = first.shape
        stream.pix_fmt = DEPTH_PIX_FMT
        stream.time_base = Fraction(1, fps)
        return stream

    return _encode_frames(codes, path, add_stream, frame_format=DEPTH_PIX_FMT, check=_check_depth_codes)


def _encode_frames(
    frames: Iterable[np.ndarray],
    path: Path,
    add_stream: Callable[[Any, np.ndarray], Any],
    *,
    frame_format: str,
    check: Callable[[np.ndarray, Path, int], None] | None = None,
) -> int:
    """Encode `frames` (each checked by `check`, given the path and its number) to a faststart mp4 at `path`, frame
    k at pts k, through the stream `add_stream` makes from the container and the first frame; returns the number of
    frames written."""
    count = 0
    container = open_mp4(path)
    try:
        stream = None
        for frame in frames:
            if check is not None:
                check(frame, path, count)
            if stream is None:
                stream = add_stream(container, frame)
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format=frame_format)
            video_frame.pts = count
            container.mux(stream.encode(video_frame))
            count += 1
        if stream is None:
            raise ValueError(f"{path}: no frames to encode")
        container.mux(stream.encode(None))
    finally:
        container.close()
    return count


def _check_depth_codes(frame: np.ndarray, path: Path, index: int) -> None:
    if frame.ndim != 2 or frame.dtype != np.uint16:
        raise ValueError(f"{path}: depth frame {index} is {frame.dtype} {frame.shape}; expected uint16 (H, W) codes")
    if frame.size and int(frame.max()) >= GRAY12_LEVELS:
        raise ValueError(
            f"{path}: depth frame {index} holds code {int(frame.max())}, above the 12-bit {GRAY12_LEVELS - 1}"
        )


def count_frames(path: Path) -> int:
    """Number of video packets (= frames) in an mp4, read from the index without decoding."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.frames:
            return int(stream.frames)
        return sum(1 for p in container.demux(stream) if p.size)


def concat_videos(inputs: list[Path], output: Path, fps: int) -> list[float]:
    """Concatenate mp4s encoded with identical settings into `output` by stream copy.

    Returns each input's duration in seconds (frames / fps), i.e. the spans that become from/to timestamps.
    The output is written to a temporary name and renamed, so an interrupted call leaves no partial file.
    pts and dts move together: reordered streams (HEVC's B frames, whose files start at a negative dts) keep
    their reordering, and an input's first dts stays above the previous one's last, as the encoder's delay is
    the same in every input.
    """
    if not inputs:
        raise ValueError(f"{output}: nothing to concatenate")
    tmp = output.with_name(output.name + ".partial")
    durations: list[float] = []
    out = av.open(str(tmp), mode="w", format="mp4", options={"movflags": "faststart"})
    try:
        out_stream = None
        offset_s = 0.0
        for src in inputs:
            with av.open(str(src)) as container:
                stream = container.streams.video[0]
                if out_stream is None:
                    out_stream = out.add_stream_from_template(stream, opaque=True)
                time_base = stream.time_base
                if time_base is None:
                    raise ValueError(f"{src}: the video stream declares no time base; re-encode it")
                shift = round(offset_s / time_base)
                frames = 0
                for packet in container.demux(stream):
                    if packet.dts is None:  # the demuxer's end-of-stream flush packet
                        continue
                    if packet.pts is None:
                        raise ValueError(f"{src}: packet at dts {packet.dts} has no pts; re-encode the video")
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = out_stream
                    out.mux(packet)
                    frames += 1
            duration = frames / fps
            durations.append(duration)
            offset_s += duration
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    out.close()
    os.replace(tmp, output)
    return durations
