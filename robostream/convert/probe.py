"""The metadata-only planning pass: per episode, its parquet footer and each camera's mp4 header.

Nothing is decoded and no row is read: a footer gives the row count and the uncompressed size lerobot cuts data
files by; an mp4's `moov` gives the stream duration lerobot sums into timestamps, the packet count and the codec.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError, MissingFileError
from robostream.format.v21 import input_file

MIB = 1024**2


@dataclass(frozen=True)
class DataProbe:
    bytes: int
    uncompressed_mb: float  # lerobot's get_parquet_file_size_in_mb
    rows: int


@dataclass(frozen=True)
class VideoProbe:
    bytes: int
    duration_s: float  # lerobot's get_video_duration_in_s: stream duration x time base, else the container's
    frames: int  # packets the index lists (0 when the container does not say)
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float  # the stream's average frame rate (0.0 when it states none)


def probe_parquet(path: Path) -> DataProbe:
    if not path.is_file():
        raise MissingFileError(f"{path}: missing episode parquet")
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetFormatError(f"{path}: not a readable parquet file: {exc}") from exc
    uncompressed = 0
    for row_group in range(metadata.num_row_groups):
        group = metadata.row_group(row_group)
        for column in range(group.num_columns):
            uncompressed += group.column(column).total_uncompressed_size
    return DataProbe(os.path.getsize(path), uncompressed / MIB, metadata.num_rows)


def probe_mp4(path: Path) -> VideoProbe:
    if not path.is_file():
        raise MissingFileError(f"{path}: missing episode video")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DatasetFormatError(f"{path}: has no video stream")
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = float(container.duration / av.time_base)
            else:
                raise DatasetFormatError(f"{path}: neither the stream nor the container states a duration")
            ctx = stream.codec_context
            rate = stream.average_rate or stream.guessed_rate
            return VideoProbe(
                os.path.getsize(path),
                duration,
                int(stream.frames or 0),
                ctx.name,
                ctx.width,
                ctx.height,
                str(ctx.pix_fmt),
                float(rate) if rate else 0.0,
            )
    except av.error.FFmpegError as exc:
        raise DatasetFormatError(f"{path}: not a readable mp4: {exc}") from exc


def probe_episodes(
    root: str, data_files: list[str], video_files: dict[str, list[str]]
) -> tuple[list[dict | None], dict[str, list[dict | None]], list[str]]:
    """Probe a batch of episodes (runs in a pool worker; plain dicts travel back). A file that cannot be probed
    gets None and its error joins the returned problems, so one report lists every bad file."""
    base = Path(root)
    problems: list[str] = []

    def probe(function, rel: str) -> dict | None:
        try:
            return asdict(function(input_file(base, rel)))
        except DatasetFormatError as exc:
            problems.append(str(exc))
            return None

    data = [probe(probe_parquet, rel) for rel in data_files]
    videos = {key: [probe(probe_mp4, rel) for rel in files] for key, files in video_files.items()}
    return data, videos, problems
