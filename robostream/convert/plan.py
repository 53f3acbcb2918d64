"""Where every episode lands in the v3.0 output, decided from per-episode sizes and durations alone (pure).

lerobot 0.6.1's converter walks the episodes in order and closes the current output file when
`current_mb + next_mb >= limit_mb` (a new file never starts empty), separately for the data files (uncompressed
parquet size) and for each camera (mp4 size on disk). Videos record `from`/`to` timestamps as running float sums of
the episode durations, restarting at 0.0 in each file. Because this depends only on metadata, every output file is
known before any is written, and each can be produced by an independent task. The float arithmetic below is
lerobot's, operation for operation, so cut points and timestamps agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from robostream.format.paths import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH

LEROBOT_FILES_PER_CHUNK = 1000  # lerobot rolls data/video file indices at DEFAULT_CHUNK_SIZE, not info's chunks_size


@dataclass(frozen=True)
class FileSpan:
    """One output file: episodes [first, end) in it, at chunk/file index."""

    chunk_index: int
    file_index: int
    first: int
    end: int


@dataclass(frozen=True)
class FileTask:
    """Produce one output file (a data parquet, or one camera's mp4) from the episodes [first, end)."""

    kind: Literal["data", "video"]
    video_key: str | None
    span: FileSpan

    @property
    def output(self) -> str:
        """Path of the output file relative to the dataset root."""
        if self.kind == "data":
            return DEFAULT_DATA_PATH.format(chunk_index=self.span.chunk_index, file_index=self.span.file_index)
        return DEFAULT_VIDEO_PATH.format(
            video_key=self.video_key, chunk_index=self.span.chunk_index, file_index=self.span.file_index
        )

    @property
    def task_id(self) -> str:
        """A file-name-safe, unique name (the output path with '/' replaced)."""
        return self.output.replace("/", "__")


def next_file(chunk_index: int, file_index: int, files_per_chunk: int = LEROBOT_FILES_PER_CHUNK) -> tuple[int, int]:
    """The chunk/file index after (chunk_index, file_index)."""
    if file_index == files_per_chunk - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def cut_files(sizes_mb: Sequence[float], limit_mb: float) -> list[FileSpan]:
    """Group consecutive episodes into files as lerobot does.

    Args:
        sizes_mb: each episode's size in MiB (parquet: uncompressed bytes / 1024**2; mp4: file bytes / 1024**2).
        limit_mb: the file size limit; a file closes before the episode that would make it reach the limit.
    Returns:
        The files in order; together they hold every episode exactly once.
    """
    spans: list[FileSpan] = []
    chunk_index = file_index = 0
    size_mb: float = 0
    first = 0
    for episode, episode_mb in enumerate(sizes_mb):
        if size_mb + episode_mb >= limit_mb and episode > first:
            spans.append(FileSpan(chunk_index, file_index, first, episode))
            chunk_index, file_index = next_file(chunk_index, file_index)
            size_mb, first = 0, episode
        size_mb += episode_mb
    if len(sizes_mb) > first:
        spans.append(FileSpan(chunk_index, file_index, first, len(sizes_mb)))
    return spans


def video_timestamps(durations_s: Sequence[float], spans: Sequence[FileSpan]) -> list[tuple[float, float]]:
    """(from_timestamp, to_timestamp) of every episode inside its camera file: running sums reset per file."""
    out: list[tuple[float, float]] = []
    for span in spans:
        elapsed = 0.0
        for episode in range(span.first, span.end):
            out.append((elapsed, elapsed + durations_s[episode]))
            elapsed += durations_s[episode]
    return out


def file_tasks(
    data_sizes_mb: Sequence[float],
    video_sizes_mb: dict[str, Sequence[float]],
    *,
    data_limit_mb: float,
    video_limit_mb: float,
) -> list[FileTask]:
    """Every output file of the conversion, data files first, then each camera's files (cameras sorted)."""
    tasks = [FileTask("data", None, span) for span in cut_files(data_sizes_mb, data_limit_mb)]
    for key in sorted(video_sizes_mb):
        tasks += [FileTask("video", key, span) for span in cut_files(video_sizes_mb[key], video_limit_mb)]
    return tasks


def span_of_each_episode(spans: Sequence[FileSpan]) -> list[FileSpan]:
    """The file span holding each episode, indexed by episode."""
    return [span for span in spans for _ in range(span.first, span.end)]
