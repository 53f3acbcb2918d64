"""Where a video's frames lie in its file, from the container's index (the mp4 moov) alone.

The mp4 sample table (in the moov, 64-150 KB at the start of the file) gives every packet's byte offset, size,
decode time and keyframe flag: the index FFmpeg's mov demuxer builds when it opens the file, read here from the
same boxes. From it, the bytes a decoder reads to produce frames at given times are known before any of them is
fetched: from the keyframe at or before the first time to the last packet decoded up to the last time. Remote
readers fetch exactly those spans, merged and many at once, instead of discovering them block by block.

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


def read_packet_index(file: BinaryIO) -> PacketIndex | None:
    """The packet index of an mp4 (a seekable file object), from its moov alone (one read; the file is left where
    it was); None when the file holds no sample table this reads (see `parse_packet_index`)."""
    span = moov_span(file)
    if span is None:
        return None
    where = file.tell()
    try:
        file.seek(span[0])
        moov = file.read(span[1] - span[0])
    finally:
        file.seek(where)
    return parse_packet_index(moov)


class _Malformed(Exception):
    """A box this parser needs is missing, truncated or holds what FFmpeg would index differently."""


def parse_packet_index(moov: bytes) -> PacketIndex | None:
    """The packets of the first video track of an mp4's moov box (its bytes), as FFmpeg's mov demuxer indexes
    them: offsets from the chunk offsets (stco/co64), the sample-to-chunk map (stsc) and sizes (stsz/stz2); decode
    times from stts, moved by the edit list as FFmpeg moves them (a B-frame stream starts below zero); keyframes
    from stss (all packets without one). None when the moov is missing a box it needs, is malformed, or holds a
    layout FFmpeg would index otherwise (several edits, fragments): no read plan, the decoder reads on demand.

    Read from the container's own tables rather than PyAV's `Stream.index_entries` (18.1+ only): one code path
    for every PyAV a user has (lerobot 0.6 pins PyAV 15), and no FFmpeg open of the file."""
    try:
        (kind, start, end), *_ = _children(moov, 0, len(moov))
        if kind != b"moov":
            return None
        movie_scale = _timescale(moov, _child(moov, start, end, b"mvhd"))
        for kind, trak, trak_end in _children(moov, start, end):
            if kind != b"trak":
                continue
            mdia = _child(moov, trak, trak_end, b"mdia")
            hdlr = _child(moov, *mdia, b"hdlr")
            if moov[hdlr[0] + 8: hdlr[0] + 12] == b"vide":
                return _track_index(moov, (trak, trak_end), mdia, movie_scale)
        return None
    except (_Malformed, ValueError):  # ValueError: numpy reading past a truncated box
        return None


def _track_index(moov: bytes, trak: tuple[int, int], mdia: tuple[int, int], movie_scale: int) -> PacketIndex:
    track_scale = _timescale(moov, _child(moov, *mdia, b"mdhd"))
    stbl = _child(moov, *_child(moov, *mdia, b"minf"), b"stbl")
    sizes = _sample_sizes(moov, stbl)
    count = len(sizes)
    if count == 0:
        raise _Malformed("no samples")
    chunk_offsets = (_table(moov, _child(moov, *stbl, b"stco"), ">u4") if _has(moov, stbl, b"stco")
                     else _table(moov, _child(moov, *stbl, b"co64"), ">u8")).astype(np.int64)
    to_chunk = _table(moov, _child(moov, *stbl, b"stsc"), ">u4", width=3).astype(np.int64)
    runs = np.diff(np.append(to_chunk[:, 0], len(chunk_offsets) + 1))  # chunks each stsc entry covers
    if len(to_chunk) == 0 or to_chunk[0, 0] != 1 or np.any(runs < 0):
        raise _Malformed("stsc")
    per_chunk = np.repeat(to_chunk[:, 1], runs)
    if per_chunk.sum() < count:
        raise _Malformed("fewer samples in chunks than sizes")
    chunk = np.repeat(np.arange(len(per_chunk)), per_chunk)[:count]
    ends = np.cumsum(sizes)
    chunk_start = np.concatenate([[0], np.cumsum(per_chunk)[:-1]])  # first sample of each chunk
    starts = ends - sizes
    pos = chunk_offsets[chunk] + starts - starts[np.minimum(chunk_start[chunk], count - 1)]
    runs_of = _table(moov, _child(moov, *stbl, b"stts"), ">u4", width=2).astype(np.int64)
    deltas = np.repeat(runs_of[:, 1], runs_of[:, 0])
    if len(deltas) < count:
        raise _Malformed("fewer durations than samples")
    dts = np.concatenate([[0], np.cumsum(deltas[: count - 1])]) + _edit_shift(moov, trak, track_scale, movie_scale)
    keyframes = (_table(moov, _child(moov, *stbl, b"stss"), ">u4").astype(np.int64) - 1
                 if _has(moov, stbl, b"stss") else np.arange(count))
    if len(keyframes) and (keyframes[0] < 0 or keyframes[-1] >= count or np.any(np.diff(keyframes) <= 0)):
        raise _Malformed("stss")
    times = dts.astype(np.float64) / track_scale
    steps = np.diff(times)
    frame_s = float(np.median(steps[steps > 0])) if np.any(steps > 0) else 0.0
    # FFmpeg's mov muxer starts decode times below zero by the reordering delay (the first frame shows at 0).
    return PacketIndex(pos=pos, reach=np.maximum.accumulate(pos + sizes), time_s=times, keyframes=keyframes,
                       frame_s=frame_s, delay_s=max(0.0, -float(times[0])))


def _edit_shift(moov: bytes, trak: tuple[int, int], track_scale: int, movie_scale: int) -> int:
    """What FFmpeg adds to a track's decode times for its edit list: leading empty edits delay it (their length,
    in the movie's timescale), the one media edit starts it at its media time (B-frame streams: below zero)."""
    if not _has(moov, trak, b"edts") or not _has(moov, _child(moov, *trak, b"edts"), b"elst"):
        return 0
    start, end = _child(moov, *_child(moov, *trak, b"edts"), b"elst")
    version, count = moov[start], int.from_bytes(moov[start + 4: start + 8], "big")
    entry = np.dtype([("duration", ">u8"), ("media_time", ">i8"), ("rate", ">i4")] if version == 1
                     else [("duration", ">u4"), ("media_time", ">i4"), ("rate", ">i4")])
    edits = np.frombuffer(moov, dtype=entry, count=count, offset=start + 8)
    empty = edits["media_time"] == -1
    media = edits[~empty]
    first_media = int(np.argmax(~empty)) if len(media) else len(edits)
    if len(media) > 1 or np.any(empty[first_media:]):
        raise _Malformed("several media edits")  # FFmpeg rebuilds the index for these: plan nothing
    delay = int(edits["duration"][empty].sum()) * track_scale // movie_scale
    return delay - (int(media["media_time"][0]) if len(media) else 0)


def _sample_sizes(moov: bytes, stbl: tuple[int, int]) -> np.ndarray:
    if _has(moov, stbl, b"stsz"):
        start, _ = _child(moov, *stbl, b"stsz")
        size, count = (int.from_bytes(moov[start + i: start + i + 4], "big") for i in (4, 8))
        if size:
            return np.full(count, size, dtype=np.int64)
        return np.frombuffer(moov, dtype=">u4", count=count, offset=start + 12).astype(np.int64)
    start, _ = _child(moov, *stbl, b"stz2")
    bits, count = moov[start + 7], int.from_bytes(moov[start + 8: start + 12], "big")
    if bits == 4:
        packed = np.frombuffer(moov, dtype=np.uint8, count=(count + 1) // 2, offset=start + 12)
        return np.stack([packed >> 4, packed & 15], axis=1).reshape(-1)[:count].astype(np.int64)
    if bits not in (8, 16):
        raise _Malformed("stz2 field size")
    return np.frombuffer(moov, dtype=">u1" if bits == 8 else ">u2", count=count, offset=start + 12).astype(np.int64)


def _table(moov: bytes, box: tuple[int, int], dtype: str, *, width: int = 1) -> np.ndarray:
    """A full box's entry count and the entries after it, as an array of `width` columns (1: flat)."""
    start, _ = box
    count = int.from_bytes(moov[start + 4: start + 8], "big")
    values = np.frombuffer(moov, dtype=dtype, count=count * width, offset=start + 8)
    return values if width == 1 else values.reshape(count, width)


def _timescale(moov: bytes, box: tuple[int, int]) -> int:
    """The timescale of an mvhd or mdhd box (after version 1's 64-bit dates, or version 0's 32-bit ones)."""
    start, _ = box
    at = start + (20 if moov[start] == 1 else 12)
    scale = int.from_bytes(moov[at: at + 4], "big")
    if scale == 0:
        raise _Malformed("timescale 0")
    return scale


def _children(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """The boxes in data[start:end]: (type, where the payload starts, where the box ends)."""
    boxes = []
    while start + 8 <= end:
        length, kind, header = int.from_bytes(data[start: start + 4], "big"), data[start + 4: start + 8], 8
        if length == 1:
            length, header = int.from_bytes(data[start + 8: start + 16], "big"), 16
        elif length == 0:
            length = end - start
        if length < header or start + length > end:
            raise _Malformed(f"box {kind!r}")
        boxes.append((kind, start + header, start + length))
        start += length
    return boxes


def _has(data: bytes, parent: tuple[int, int], kind: bytes) -> bool:
    return any(found == kind for found, _, _ in _children(data, *parent))


def _child(data: bytes, start: int, end: int, kind: bytes) -> tuple[int, int]:
    for found, payload, box_end in _children(data, start, end):
        if found == kind:
            return payload, box_end
    raise _Malformed(f"no {kind!r} box")


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
