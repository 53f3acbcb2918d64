"""Re-encode one camera file of a v3.0 dataset: every frame decoded in order and encoded again with its own pts.

The output stream keeps the source's time base and each frame's presentation time, so the episode table's
`from_timestamp`/`to_timestamp` and every parquet `timestamp` still name the same frames. The encoder gets closed
GOPs of exactly `gop` frames and no B-frames (`video/encode.closed_gop_options`), yuv420p, in an mp4 with its index
at the front, as lerobot writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import av

from robostream.durable import fsync_file
from robostream.errors import DatasetFormatError
from robostream.video.encode import closed_gop_options, encoder_name, open_mp4

PIX_FMT = "yuv420p"  # what NVDEC and every CPU decoder take; lerobot's default
TargetCodec = Literal["h264", "hevc", "av1"]
# Defaults per codec: near the source's quality at lerobot's AV1 crf 30 (x264/x265's own default crf), and the
# fast presets (a transcode is a bulk job; x265's "medium" is ~3x slower than "fast" for ~5% smaller files).
DEFAULT_CRF: dict[str, int] = {"h264": 23, "hevc": 28, "av1": 30}
DEFAULT_PRESET: dict[str, str | int] = {"h264": "veryfast", "hevc": "fast", "av1": 12}


@dataclass(frozen=True)
class TranscodeSettings:
    """How the chosen cameras are re-encoded (what info.json records as `video.codec`, `video.g`, ...)."""

    codec: TargetCodec
    gop: int
    crf: int
    preset: str | int

    def encoder_options(self) -> dict[str, str]:
        return closed_gop_options(self.codec, gop=self.gop, crf=self.crf, preset=self.preset)


def transcode_file(source: Path, output: Path, settings: TranscodeSettings) -> int:
    """Re-encode the video stream of `source` into `output` (see the module docstring); returns its size (fsynced).

    Args:
        source: a camera's mp4 file.
        output: where the new mp4 is written (its folder exists).
        settings: codec, GOP, quality and preset.
    Raises:
        DatasetFormatError: the source cannot be decoded, or a frame has no presentation time.
    """
    try:
        reader = av.open(str(source))
    except av.error.FFmpegError as exc:
        raise DatasetFormatError(f"{source}: not a readable video file: {exc}") from exc
    try:
        if not reader.streams.video:
            raise DatasetFormatError(f"{source}: holds no video stream")
        decoding = reader.streams.video[0]
        writer = open_mp4(output)
        try:
            encoding = writer.add_stream(encoder_name(settings.codec), options=settings.encoder_options())
            encoding.width, encoding.height = decoding.codec_context.width, decoding.codec_context.height
            encoding.pix_fmt = PIX_FMT
            encoding.time_base = decoding.time_base  # pts are copied, so they must mean the same times
            if decoding.average_rate is not None:
                encoding.codec_context.framerate = decoding.average_rate
            for frame in reader.decode(decoding):
                if frame.pts is None:
                    raise DatasetFormatError(f"{source}: a frame without a presentation time; re-mux the file")
                if frame.format.name != PIX_FMT:
                    frame = frame.reformat(format=PIX_FMT)
                # A decoded keyframe says so; an encoder would obey it and put keyframes where the source had them.
                frame.pict_type = av.video.frame.PictureType.NONE
                writer.mux(encoding.encode(frame))
            writer.mux(encoding.encode(None))
        finally:
            writer.close()
    except av.error.FFmpegError as exc:
        raise DatasetFormatError(f"{source}: re-encoding to {settings.codec} failed: {exc}") from exc
    finally:
        reader.close()
    return fsync_file(output)
