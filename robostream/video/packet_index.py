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

from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

REORDER_FRAMES = 4  # packets past the last frame's decode time that reordered (B-frame) streams may need
AVIO_BYTES = 64 << 10  # FFmpeg reads a file object in chunks of this size from where it seeks


@dataclass(frozen=True)
class PacketIndex:
    """The packets of a file's first video stream, in decode order."""

    pos: np.ndarray  # int64 byte offset of each packet
    end: np.ndarray  # int64 byte offset just past each packet
    time_s: np.ndarray  # float64 decode time of each packet, seconds
    keyframes: np.ndarray  # int64 positions of the keyframe packets, ascending
    frame_s: float  # typical time between packets

    def byte_span(self, first_s: float, last_s: float) -> tuple[int, int]:
        """Bytes [start, end) a decoder reads to produce the frames shown from `first_s` to `last_s` (file
        times): from the keyframe at or before `first_s` through the packets decoded up to `last_s` (plus a few
        for reordered streams), in the chunks FFmpeg reads from there."""
        half = 0.5 * self.frame_s
        lo = int(np.searchsorted(self.time_s, first_s + half, side="right")) - 1
        key = int(np.searchsorted(self.keyframes, max(lo, 0), side="right")) - 1
        first = int(self.keyframes[key]) if key >= 0 else 0
        last = int(np.searchsorted(self.time_s, last_s + half + REORDER_FRAMES * self.frame_s, side="right"))
        last = min(max(last, first + 1), len(self.pos))
        start = int(self.pos[first])
        chunks = -(-(int(self.end[first:last].max()) - start) // AVIO_BYTES)
        return start, start + chunks * AVIO_BYTES


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
    return PacketIndex(pos=rows[:, 0], end=rows[:, 0] + rows[:, 1], time_s=times,
                       keyframes=np.flatnonzero(rows[:, 3]), frame_s=frame_s)
