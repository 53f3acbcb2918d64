"""Where a video's frames lie in its file, from the container's index (the mp4 moov) alone.

The mp4 sample table (in the moov, 64-150 KB at the start of the file) gives every packet's byte offset, size,
decode and presentation time and keyframe flag: the index FFmpeg's mov demuxer builds when it opens the file, read
here from the same boxes. From it, the bytes a decoder reads to produce frames at given times are known before any of
them is fetched: from the last keyframe shown at or before the first time to the last packet those frames need.
Remote readers fetch exactly those spans, merged and many at once, instead of discovering them block by block. The
same presentation times give torchcodec a frame index for files whose keyframes cannot be found by decode time
(video/decoder.py: HEVC open GOP).

`byte_span` is a read plan, never a correctness rule: a decoder that reads outside it still gets its bytes (one
more round trip), and every decoded frame's time is still checked against the asked time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol

import numpy as np

from robostream.array_file import read_arrays, write_arrays

REORDER_FRAMES = 4  # packets a decoder reads past the last one a frame needs before it outputs that frame
INDEX_FILE = "packet_index.arrays"  # in the index's derived folder
AVIO_BYTES = 64 << 10  # FFmpeg reads a file object in chunks of this size from where it seeks


class SeekableReader(Protocol):
    """A binary file open for reading that can seek: a local file, or the storage's RangedReader."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


@dataclass(frozen=True)
class PacketIndex:
    """The packets of a file's first video stream, in decode order. Times are in ticks of 1/timescale s (FFmpeg's
    time base for the stream), as FFmpeg's mov demuxer hands them to decoders."""

    pos: np.ndarray  # int64 byte offset of each packet
    size: np.ndarray  # int64 bytes of each packet
    reach: np.ndarray  # int64: the furthest byte offset just past any of packets 0..i
    dts: np.ndarray  # int64 decode time of each packet
    pts: np.ndarray  # int64 presentation time of each packet (its decode time plus its ctts composition offset)
    duration: np.ndarray  # int64 time to the next packet's decode time (stts)
    keyframes: np.ndarray  # int64 positions of the keyframe packets, ascending
    timescale: int  # ticks per second

    @functools.cached_property
    def frame_s(self) -> float:
        """The typical time between frames shown, in seconds."""
        steps = np.diff(np.sort(self.pts)) / self.timescale
        return float(np.median(steps[steps > 0])) if np.any(steps > 0) else 0.0

    @functools.cached_property
    def has_leading_frames(self) -> bool:
        """True when some frame is decoded after a keyframe but shown before it (HEVC open GOP: the RASL frames
        of a CRA keyframe). FFmpeg's mp4 seek picks keyframes by decode time, so a seek to such a frame's time lands
        on that keyframe, whose decoder then drops the frame: finding it needs the presentation times."""
        later = np.minimum.accumulate(self.pts[::-1])[::-1]  # the earliest pts among packets i, i+1, ...
        keys = self.keyframes[self.keyframes + 1 < len(self.pts)]
        return bool(np.any(later[keys + 1] < self.pts[keys]))

    @functools.cached_property
    def evenly_shown(self) -> bool:
        """Whether frames are shown a constant step apart (a quarter step's give) and none before its keyframe: a
        decoder fed a frame's packets alone finds it by its place in that grid (video/packet_frames.py)."""
        steps = np.diff(np.sort(self.pts))
        if self.has_leading_frames or not len(steps):
            return not self.has_leading_frames
        step = np.median(steps)
        return bool(step > 0 and np.all(np.abs(steps - step) < 0.25 * step))

    @functools.cached_property
    def _shown(self) -> tuple[np.ndarray, np.ndarray]:
        """Presentation times in seconds, ascending, and for each the furthest packet (decode order) that any frame
        shown up to then is in."""
        order = np.argsort(self.pts, kind="stable")
        return self.pts[order] / self.timescale, np.maximum.accumulate(order)

    @functools.cached_property
    def keyframes_shown(self) -> tuple[np.ndarray, np.ndarray]:
        """The keyframes' presentation times in seconds, ascending, and their packet positions."""
        order = np.argsort(self.pts[self.keyframes], kind="stable")
        return self.pts[self.keyframes[order]] / self.timescale, self.keyframes[order]

    def packets(self, first_s: np.ndarray, last_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The packets (decode order) that produce the frames shown from `first_s[i]` to `last_s[i]` (file times),
        for each i, [first, last]: from the last keyframe shown at or before `first_s` (by presentation time: in an
        open GOP the keyframe decoded just before a frame may be shown after it) through the last packet any of
        those frames is in (`last` < `first` only for a file whose frames are shown before their keyframe)."""
        half = 0.5 * self.frame_s
        key_shown, key_pos = self.keyframes_shown
        key = np.searchsorted(key_shown, np.asarray(first_s) + half, side="right") - 1
        first = np.where(key >= 0, key_pos[np.maximum(key, 0)], 0) if len(key_pos) else np.zeros(len(key), np.int64)
        shown, decoded_by = self._shown
        upto = np.searchsorted(shown, np.asarray(last_s) + half, side="right") - 1
        return first, decoded_by[np.maximum(upto, 0)]

    def packet_bytes(self, first_s: np.ndarray, last_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes [start, end) of the packets `packets` names: what a decoder fed those packets alone reads."""
        first, last = self.packets(first_s, last_s)
        return self.pos[first], self.reach[np.maximum(last, first)]

    def byte_spans(self, first_s: np.ndarray, last_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes [start, end) FFmpeg reads through a file object to produce the frames shown from `first_s[i]` to
        `last_s[i]`: the packets `packets` names (plus a few the decoder reads before it outputs them), and its
        chunked reads around them."""
        first, last = self.packets(first_s, last_s)
        last = np.minimum(last + 1 + REORDER_FRAMES, len(self.pos))
        last = np.maximum(last, np.minimum(first + 1, len(self.pos)))
        furthest = self.reach[last - 1]  # packets before `first` end before it (file order): no overreach
        # FFmpeg reads in chunks of AVIO_BYTES, from the keyframe's offset or, after a short forward seek, on from
        # where it was (chunk-aligned there): any such run of chunks that covers the last byte ends within a chunk
        # past it.
        return self.pos[first] // AVIO_BYTES * AVIO_BYTES, furthest + AVIO_BYTES


def moov_span(file: SeekableReader) -> tuple[int, int] | None:
    """Bytes [start, end) of an mp4's moov box (the index), found by walking the top-level box headers (16 bytes
    each, at the start of the file and after each box); None when there is none (not an mp4) before the end.
    A remote reader fetches it in one request instead of FFmpeg reading it chunk after chunk."""
    where = file.tell()
    try:
        return _find_moov(file, file.seek(0, 2))
    finally:
        file.seek(where)


def _find_moov(file: SeekableReader, size: int) -> tuple[int, int] | None:
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


def read_packet_index(file: SeekableReader) -> PacketIndex | None:
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
    times from stts, moved by the edit list as FFmpeg moves them (a B-frame stream starts below zero); presentation
    times from those and the composition offsets (ctts); keyframes from stss (all packets without one). None when
    the moov is missing a box it needs, is malformed, or holds a layout FFmpeg would index otherwise (several
    edits, fragments): no read plan, the decoder reads on demand.

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
            if moov[hdlr[0] + 8 : hdlr[0] + 12] == b"vide":
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
    chunk_offsets = (
        _table(moov, _child(moov, *stbl, b"stco"), ">u4")
        if _has(moov, stbl, b"stco")
        else _table(moov, _child(moov, *stbl, b"co64"), ">u8")
    ).astype(np.int64)
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
    decoded = np.concatenate([[0], np.cumsum(deltas[: count - 1])]) + _edit_shift(moov, trak, track_scale, movie_scale)
    offsets, dts_shift = _composition_offsets(moov, stbl, count)
    keyframes = (
        _table(moov, _child(moov, *stbl, b"stss"), ">u4").astype(np.int64) - 1
        if _has(moov, stbl, b"stss")
        else np.arange(count)
    )
    if len(keyframes) and (keyframes[0] < 0 or keyframes[-1] >= count or np.any(np.diff(keyframes) <= 0)):
        raise _Malformed("stss")
    # FFmpeg's mov muxer starts decode times below zero by the reordering delay (the first frame shows at 0), and
    # the demuxer moves them further down when composition offsets are negative, so that none follows its pts.
    return PacketIndex(
        pos=pos,
        size=sizes.astype(np.int64),
        reach=np.maximum.accumulate(pos + sizes),
        dts=decoded - dts_shift,
        pts=decoded + offsets,
        duration=deltas[:count].copy(),
        keyframes=keyframes,
        timescale=track_scale,
    )


def _composition_offsets(moov: bytes, stbl: tuple[int, int], count: int) -> tuple[np.ndarray, int]:
    """Each sample's composition offset (ctts: pts minus dts; zeros without the box) and how far FFmpeg moves
    decode times down for the negative ones. FFmpeg reads the offsets as signed whatever the box's version (version
    1 declares them signed, version 0 is written signed by some muxers), and, as it does, the shift ignores the last
    two entries, and a table with offsets beyond 2^28 there is dropped (treated as absent)."""
    if not _has(moov, stbl, b"ctts"):
        return np.zeros(count, dtype=np.int64), 0
    runs = _table(moov, _child(moov, *stbl, b"ctts"), ">i4", width=2).astype(np.int64)
    if np.any(runs[:, 0] < 0) or runs[:, 0].sum() < count:
        raise _Malformed("fewer composition offsets than samples")
    shifting = runs[:-2, 1]
    if np.any(np.abs(shifting) > 1 << 28):
        return np.zeros(count, dtype=np.int64), 0
    return np.repeat(runs[:, 1], runs[:, 0])[:count], int(max(0, -shifting.min(initial=0)))


def _edit_shift(moov: bytes, trak: tuple[int, int], track_scale: int, movie_scale: int) -> int:
    """What FFmpeg adds to a track's decode times for its edit list: leading empty edits delay it (their length,
    in the movie's timescale), the one media edit starts it at its media time (B-frame streams: below zero)."""
    if not _has(moov, trak, b"edts") or not _has(moov, _child(moov, *trak, b"edts"), b"elst"):
        return 0
    start, end = _child(moov, *_child(moov, *trak, b"edts"), b"elst")
    version, count = moov[start], int.from_bytes(moov[start + 4 : start + 8], "big")
    entry = np.dtype(
        [("duration", ">u8"), ("media_time", ">i8"), ("rate", ">i4")]
        if version == 1
        else [("duration", ">u4"), ("media_time", ">i4"), ("rate", ">i4")]
    )
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
        size, count = (int.from_bytes(moov[start + i : start + i + 4], "big") for i in (4, 8))
        if size:
            return np.full(count, size, dtype=np.int64)
        return np.frombuffer(moov, dtype=">u4", count=count, offset=start + 12).astype(np.int64)
    start, _ = _child(moov, *stbl, b"stz2")
    bits, count = moov[start + 7], int.from_bytes(moov[start + 8 : start + 12], "big")
    if bits == 4:
        packed = np.frombuffer(moov, dtype=np.uint8, count=(count + 1) // 2, offset=start + 12)
        return np.stack([packed >> 4, packed & 15], axis=1).reshape(-1)[:count].astype(np.int64)
    if bits not in (8, 16):
        raise _Malformed("stz2 field size")
    return np.frombuffer(moov, dtype=">u1" if bits == 8 else ">u2", count=count, offset=start + 12).astype(np.int64)


def _table(moov: bytes, box: tuple[int, int], dtype: str, *, width: int = 1) -> np.ndarray:
    """A full box's entry count and the entries after it, as an array of `width` columns (1: flat)."""
    start, _ = box
    count = int.from_bytes(moov[start + 4 : start + 8], "big")
    values = np.frombuffer(moov, dtype=dtype, count=count * width, offset=start + 8)
    return values if width == 1 else values.reshape(count, width)


def _timescale(moov: bytes, box: tuple[int, int]) -> int:
    """The timescale of an mvhd or mdhd box (after version 1's 64-bit dates, or version 0's 32-bit ones)."""
    start, _ = box
    at = start + (20 if moov[start] == 1 else 12)
    scale = int.from_bytes(moov[at : at + 4], "big")
    if scale == 0:
        raise _Malformed("timescale 0")
    return scale


def _children(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """The boxes in data[start:end]: (type, where the payload starts, where the box ends)."""
    boxes = []
    while start + 8 <= end:
        length, kind, header = int.from_bytes(data[start : start + 4], "big"), data[start + 4 : start + 8], 8
        if length == 1:
            length, header = int.from_bytes(data[start + 8 : start + 16], "big"), 16
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
    write_arrays(folder / INDEX_FILE, arrays)


def load_packet_index(folder: Path) -> PacketIndex | None:
    """The index `save_packet_index` wrote (None: the file has none). Read-ahead threads load indexes at once."""
    values = read_arrays(folder / INDEX_FILE)
    if not values:
        return None
    arrays = {f.name: values[f.name] for f in fields(PacketIndex) if f.name != "timescale"}
    timescale = values["timescale"]
    if timescale.ndim or timescale.dtype.kind not in "iu" or any(a.ndim != 1 for a in arrays.values()):
        raise ValueError(f"{folder / INDEX_FILE}: not a packet index (timescale {timescale!r})")
    return PacketIndex(**arrays, timescale=int(timescale))
