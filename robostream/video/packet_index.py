"""Where a video's frames lie in its file, from the container's index (the mp4 moov) alone.

The mp4 sample table gives every packet's byte offset, size, decode time and keyframe flag; FFmpeg's mov demuxer
builds it when the file is opened, reading only the header (64-150 KB), and PyAV (18.1+) exposes it as
`Stream.index_entries`. From it, the bytes a decoder reads to produce frames at given times are known before any
of them is fetched: from the keyframe at or before the first time to the last packet decoded up to the last time.
Remote readers fetch exactly those spans, merged and many at once, instead of discovering them block by block.

`byte_span` is a read plan, never a correctness rule: a decoder that reads outside it still gets its bytes (one
more round trip), and every decoded frame's time is still checked against the asked time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import BinaryIO

import numpy as np

REORDER_FRAMES = 4  # packets past the last frame's decode time that reordered (B-frame) streams may need
AVIO_BYTES = 64 << 10  # FFmpeg reads a file object in chunks of this size from where it seeks


@dataclass(frozen=True)
class PacketIndex:
    """The packets of a file's first video stream, in decode order."""

    pos: np.ndarray  # int64 byte offset of each packet
    reach: np.ndarray  # int64: the furthest byte offset just past any of packets 0..i
    time_s: np.ndarray  # float64 decode time of each packet, seconds
    keyframes: np.ndarray  # int64 positions of the keyframe packets, ascending
    frame_s: float  # typical time between packets
    delay_s: float  # how far decode times run behind presentation times (B-frame reordering; 0 without)

    def byte_spans(self, first_s: np.ndarray, last_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes [start, end) a decoder reads to produce the frames shown from `first_s[i]` to `last_s[i]` (file
        times), for each i: from the keyframe at or before `first_s` through the packets decoded up to `last_s`
        (plus a few for reordered streams), and FFmpeg's chunked reads around them."""
        half = 0.5 * self.frame_s
        # Decode times are what the index holds: a keyframe shown at t is decoded at t - delay.
        lo = np.maximum(np.searchsorted(self.time_s, np.asarray(first_s) + half - self.delay_s, side="right") - 1, 0)
        key = np.searchsorted(self.keyframes, lo, side="right") - 1
        first = np.where(key >= 0, self.keyframes[np.maximum(key, 0)], 0) if len(self.keyframes) else np.zeros_like(lo)
        last = np.searchsorted(self.time_s, np.asarray(last_s) + half + REORDER_FRAMES * self.frame_s, side="right")
        last = np.minimum(np.maximum(last, first + 1), len(self.pos))
        furthest = self.reach[last - 1]  # packets before `first` end before it (file order): no overreach
        # FFmpeg reads in chunks of AVIO_BYTES, from the keyframe's offset or, after a short forward seek, on from
        # where it was (chunk-aligned there): any such run of chunks that covers the last byte ends within a chunk
        # past it.
        return self.pos[first] // AVIO_BYTES * AVIO_BYTES, furthest + AVIO_BYTES


def moov_span(file: BinaryIO) -> tuple[int, int] | None:
    """Bytes [start, end) of an mp4's moov box (the index), found by walking the top-level box headers (16 bytes
    each, at the start of the file and after each box); None when there is none (not an mp4) before the end.
    A remote reader fetches it in one request instead of FFmpeg reading it chunk after chunk."""
    where = file.tell()
    try:
        return _find_moov(file, file.seek(0, 2))
    finally:
        file.seek(where)


def _find_moov(file: BinaryIO, size: int) -> tuple[int, int] | None:
    offset = 0
    while offset + 8 <= size:
        file.seek(offset)
        header = file.read(16)
        if len(header) < 8:
            return None
        length, kind = int.from_bytes(header[:4], "big"), header[4:8]
        if length == 1 and len(header) == 16:  # 64-bit size follows the type
            length = int.from_bytes(header[8:16], "big")
        elif length == 0:  # the box runs to the end of the file
            length = size - offset
        if length < 8:
            return None
        if kind == b"moov":
            return offset, min(size, offset + length)
        offset += length
    return None


def read_packet_index(source: str | BinaryIO) -> PacketIndex | None:
    """The packet index of a video file (a path or a seekable file object), reading only its header; None when
    this PyAV has no `index_entries` (before 18.1) or the container keeps no index."""
    import av

    with av.open(source) as container:
        stream = container.streams.video[0]
        entries = getattr(stream, "index_entries", None)
        if entries is None or not len(entries):
            return None
        rows = np.array([(e.pos, e.size, e.timestamp, e.is_keyframe) for e in entries], dtype=np.int64)
        time_base = float(stream.time_base)
    # Decode order is file order for the single-track files LeRobot writes; sort by time to be safe for others.
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    times = rows[:, 2].astype(np.float64) * time_base
    steps = np.diff(times)
    frame_s = float(np.median(steps[steps > 0])) if np.any(steps > 0) else 0.0
    # FFmpeg's mov muxer starts decode times below zero by the reordering delay (the first frame shows at 0).
    delay_s = max(0.0, -float(times[0])) if len(times) else 0.0
    return PacketIndex(pos=np.ascontiguousarray(rows[:, 0]), reach=np.maximum.accumulate(rows[:, 0] + rows[:, 1]), time_s=times,
                       keyframes=np.flatnonzero(rows[:, 3]), frame_s=frame_s, delay_s=delay_s)


def save_packet_index(index: PacketIndex | None, folder: Path) -> None:
    """Write an index (or that the file has none) to `folder` (a node-local derived folder)."""
    arrays = {} if index is None else {f.name: np.asarray(getattr(index, f.name)) for f in fields(PacketIndex)}
    np.savez(folder / "packet_index.npz", **arrays)


def load_packet_index(folder: Path) -> PacketIndex | None:
    """The index `save_packet_index` wrote (None: the file has none)."""
    with np.load(folder / "packet_index.npz") as saved:
        if not saved.files:
            return None
        values = {f.name: saved[f.name] for f in fields(PacketIndex)}
    return PacketIndex(**{name: float(value) if value.ndim == 0 else value for name, value in values.items()})
