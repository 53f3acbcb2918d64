"""A streaming consumer's picks, passed on in order, with the video bytes of the next ones fetched ahead.

The plan fixes every pick (stream, piece, position) before anything is decoded, so the bytes each will need are
known: the frames of the pick's sample (its windows included) per camera, located in the camera file by its packet
index (datasets/video_read_ahead.py). Picks are taken from the plan ahead of the consumer and their spans handed to
the storage's read-ahead in pick order, until the bytes asked for ahead reach the depth Little's law gives (the
rate the decoders take fetched bytes x a request's time, storage/read_ahead.py): the next samples' frames of every
live piece come first, the rest of each piece behind them, and the first batch costs about one round trip (the
pass's first round asks for its samples' bytes alone, a piece's picks together, and each piece's chunk comes with
its next pick: the first batch decodes beside none of the live pieces' chunk requests).

A piece is read forward, so a pick asks only for the bytes past what its piece asked for already: its own sample's
bytes, then the rest of the piece a chunk ahead of it, about half a chunk per request, so that a piece costs a few
large ranged GETs rather than one per 64 KiB block (object stores cap GETs per second per key prefix:
docs/scale-out.md). A chunk up to REQUEST_BYTES adds little transfer to a round trip and comes in the sample's own
request; a larger one in a request of its own behind it ("later", so it never holds back the next samples' bytes).
A chunk is the read buffer's free half shared by the live pieces' cameras (at most 16 MiB, storage/read_ahead.py),
so the bytes asked for ahead stay within it; a buffer left to its default grows to hold GROWN_BLOCKS blocks per
live camera piece, one sized by the user is kept (and a pass short of 4 blocks each says so). When a piece is done,
the blocks fetched for it that no decoder read are released (they no longer count as ahead).
"""

from __future__ import annotations

import itertools
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from robostream.datasets.frame_reader import FrameReader
from robostream.plan.epoch import EpochPlan, Pick
from robostream.plan.piece import PieceGeometry
from robostream.storage.blocks import BlockCache
from robostream.storage.read_ahead import REQUEST_BYTES, SEQUENTIAL_REQUEST_BYTES, ReadAhead
from robostream.storage.store import RangedReader

FLOOR_BYTES = 8 << 20  # asked for ahead at least, before the decoders' rate is measured
MIN_PICKS_AHEAD = 256  # a few batches ahead whatever their bytes (the read-ahead still fetches within its room)
MAX_PICKS_AHEAD = 4096  # bounds the picks held when their bytes are tiny
# Blocks per live camera piece a read buffer left to its default grows to: at 4 the read-ahead's room runs out (each
# keeps a block or two of its next bytes fetched ahead), 5.2 measured as fast as 14 (BENCHMARKS.md, tenth session).
GROWN_BLOCKS = 6
PICKS_PER_ROUND = 32  # picks taken from the plan at a time (their new files' indexes are read together)


@dataclass
class _Piece:
    reader: FrameReader  # of the piece's source
    episode: int
    frames: dict[str, np.ndarray]  # per camera, (samples, T) frames in the piece's sample order (its geometry)
    # per camera: the file's reader, each sample's byte span (start, end arrays) and the piece's last byte; None:
    # nothing known
    located: dict[str, tuple[RangedReader, np.ndarray, np.ndarray, int] | None] | None = None
    asked: dict[str, tuple[int, int]] = field(default_factory=dict)  # per camera: last position's start, span end
    spans: dict[str, tuple[RangedReader, int, int]] = field(default_factory=dict)  # per camera: bytes asked for


class PickReadAhead:
    """Picks of one consumer role with their video bytes fetched ahead (remote sources; see module doc)."""

    def __init__(
        self,
        plan: EpochPlan,
        *,
        readers: Sequence[FrameReader],
        locate: Callable[[int], tuple[int, int, int]],
        geometry: Callable[[int, int], PieceGeometry],
    ) -> None:
        """
        Args:
            plan: the pass's plan.
            readers: the frame reader of each source.
            locate: an epoch unit's (source, episode, first frame).
            geometry: a (stream, piece)'s geometry, computed once and shared with the frame reader.
        """
        self.plan, self.readers, self._locate, self._geometry = plan, readers, locate, geometry
        self._pieces: dict[tuple[int, int], _Piece] = {}
        self._remote = [r for r in readers if r.video_ahead.enabled]
        self._live_cameras = 0  # cameras of the pieces taken from the plan and not done (they share the buffer)
        self._read_aheads: list[ReadAhead] | None = None
        self._short: tuple[BlockCache, int] | None = None  # a read buffer short of 4 blocks per live camera piece

    @property
    def enabled(self) -> bool:
        return bool(self._remote)

    def __call__(self, picks: Iterator[Pick]) -> Iterator[Pick]:
        window: deque[Pick] = deque()
        exhausted = False
        unchecked = 0  # picks handed out since the depth was last found deep enough
        handed_out = 0
        while True:
            # At most one round per pick handed out, and the window's floor ramps up with the picks handed out:
            # none ahead while the first round is handed out (the first batch's picks are pulled before any is
            # decoded: it waits for its own pieces' bytes and rows, not for the requests of the pieces of the
            # whole depth, ~1-3 ms of client CPU each), then growing a pick per pick handed out up to
            # MIN_PICKS_AHEAD (a batch or more ahead from the second batch on: its bytes come while one decodes).
            # Past the floor, the depth is checked once per round's worth of picks handed out (a check reads
            # shared counters under locks).
            floor = max(1, min(MIN_PICKS_AHEAD, handed_out - PICKS_PER_ROUND))
            if exhausted or len(window) >= MAX_PICKS_AHEAD:
                wanted = False
            elif len(window) < floor:
                wanted = True
            elif floor < MIN_PICKS_AHEAD:
                wanted = False  # still ramping up
            else:
                unchecked += 1
                wanted = unchecked >= PICKS_PER_ROUND and self._wants_more()
                unchecked = 0 if unchecked >= PICKS_PER_ROUND else unchecked
            if wanted:
                taken = list(itertools.islice(picks, PICKS_PER_ROUND))
                exhausted = len(taken) < PICKS_PER_ROUND
                entries = [self._entry(pick) for pick in taken]
                # The packet indexes of files met for the first time are read concurrently (a round trip each).
                for reader in self._remote:
                    reader.video_ahead.prepare(
                        [
                            (e.episode, key)
                            for e in entries
                            if e is not None and e.reader is reader and e.located is None
                            for key in e.frames
                        ]
                    )
                # The pass's first round asks for its samples' bytes alone, a piece's picks in it together: the first
                # batch decodes beside no chunk's request (a chunk is asked for at the piece's next pick, a round or
                # more later, long before the piece's first decoder call has used up what it decoded ahead).
                through: dict[tuple[int, int], int] = {}
                if handed_out == 0:
                    for stream, piece, position in taken:
                        through[(stream, piece)] = max(position, through.get((stream, piece), position))
                for pick, entry in zip(taken, entries):
                    if entry is not None:
                        self._ask(entry, pick[2], through=through.get((pick[0], pick[1])))
                window.extend(taken)
            # Said once the live pieces are all taken (a few batches in), or at the end of a shorter pass.
            if self._short and (handed_out == MIN_PICKS_AHEAD or (not window and handed_out < MIN_PICKS_AHEAD)):
                self._warn_small_buffer(*self._short)
            if not window:
                return
            handed_out += 1
            yield window.popleft()

    def done(self, stream: int, piece: int) -> None:
        """The consumer took the piece's last sample: what was fetched for it and not read leaves the ahead."""
        entry = self._pieces.pop((stream, piece), None)
        if entry is not None:
            self._live_cameras -= len(entry.frames)
            for reader, start, end in entry.spans.values():
                reader.release(start, end)

    def _wants_more(self) -> bool:
        if self._read_aheads is None:  # this process's (the pass runs in one process), each shared one once
            self._read_aheads = list({id(a): a for a in (r.video_ahead.read_ahead for r in self._remote)}.values())
        ahead = self._read_aheads
        return sum(r.ahead_bytes() for r in ahead) < max(r.depth_bytes(FLOOR_BYTES) for r in ahead)

    def _entry(self, pick: Pick) -> _Piece | None:
        """What the read-ahead keeps of a pick's piece (None: its source reads nothing ahead)."""
        stream, piece, _ = pick
        entry = self._pieces.get((stream, piece))
        if entry is None:
            unit, _, _ = self.plan.pieces[stream][piece]
            source, episode, _ = self._locate(unit)
            reader = self.readers[source]
            if not reader.video_ahead.enabled:
                return None
            reader.rows.read_ahead(episode)  # its rows too, in the background
            entry = _Piece(reader, episode, self._geometry(stream, piece).camera_frames)
            self._pieces[(stream, piece)] = entry
            self._live_cameras += len(entry.frames)
        return entry

    def _ask(self, entry: _Piece, position: int, *, through: int | None) -> None:
        """Ask for the bytes of the pick at `position` of the piece and the piece's chunk ahead of it (module doc);
        `through`: the pick is in the pass's first round, whose last pick of the piece is at that position: the bytes
        of the piece's picks up to it, and no chunk."""
        if entry.located is None:  # the piece's first pick: every sample's spans at once (its index is read)
            video, fps = entry.reader.video_ahead, entry.reader.meta.fps
            entry.located = {}
            for key, frames in entry.frames.items():
                spans = video.spans(entry.episode, key, frames.min(axis=1) / fps, frames.max(axis=1) / fps)
                if spans is not None:  # a sample's frames are decoded with the next decode_ahead samples'
                    reader, starts, ends = spans
                    starts, ends = decode_runs(starts, ends, entry.reader.decode_ahead)
                    entry.located[key] = (reader, starts, ends, int(ends.max()) if len(ends) else 0)
                else:
                    entry.located[key] = None
        share = self._chunk_bytes(entry)
        for key, located in entry.located.items():
            if located is None:
                continue
            reader, starts, ends, last = located
            start, end = (
                int(starts[position]),
                int(ends[position] if through is None else ends[[position, through]].max()),
            )
            previous = entry.asked.get(key)
            # Forward in the piece: only the bytes past what it asked for already (a residue pass of windowed
            # samples goes back to the piece's start: ask for the whole span again, cached blocks are skipped).
            after = previous[1] if previous is not None and start >= previous[0] else 0
            if share < reader.block_size:  # the read buffer is short of 4 blocks per live camera piece
                share = self._room(entry, reader.block_size)
            chunk = max(reader.block_size, share)
            if end <= after and (after >= last or after - end >= chunk // 2):
                entry.asked[key] = (start, after)  # most picks: their bytes and the chunk ahead are asked for
                continue
            if end > after:  # this sample's own bytes first, with the chunk when it adds little to the round trip
                glued = chunk <= REQUEST_BYTES and through is None
                begin, stop = max(start, after), (min(last, end + chunk) if glued else end)
                reader.fetch_ahead(begin, stop, need="soon", request_bytes=stop - begin if stop > end else None)
                after = stop
            if through is None and after < last and after - end < chunk // 2:  # the next chunk, in large requests
                ahead = min(last, end + chunk)
                reader.fetch_ahead(after, ahead, need="later", request_bytes=chunk)
                after = ahead
            held = entry.spans.get(key)
            entry.spans[key] = (reader, min(start, held[1]), max(after, held[2])) if held else (reader, start, after)
            entry.asked[key] = (start, after)

    def _room(self, entry: _Piece, block_size: int) -> int:
        """A chunk's bytes where the read buffer holds less than 4 blocks per live camera piece: the buffer grown to
        GROWN_BLOCKS each where the user did not size it, else what it holds (and the pass warns once)."""
        blocks = entry.reader.video_ahead.read_ahead.blocks
        if entry.reader.meta.data_storage.read_options.read_buffer_grows:
            blocks.grow(GROWN_BLOCKS * block_size * self._live_cameras)
        else:
            self._short = (blocks, block_size)
        return self._chunk_bytes(entry)

    def _warn_small_buffer(self, blocks: BlockCache, block_size: int) -> None:
        """The read buffer holds less than 4 blocks per live camera piece. Each piece's next bytes then take a block
        or two of the free half, the read-ahead runs out of room for the next samples' bytes, and decoders wait a
        round trip per decode (in-process, 96 live pieces x 3 cameras, 64 KiB blocks, 50 ms: 40 batches took 2 s
        with 96-256 MiB, 6.8 s with 64 MiB, 19 s with 32 MiB)."""
        need_mb = -(-GROWN_BLOCKS * block_size * self._live_cameras // 10**6)
        warnings.warn(
            f"read_buffer={blocks.budget_bytes / 1e6:.0f} MB holds less than 4 blocks of {block_size >> 10} KiB for "
            f"each of the {self._live_cameras} live camera pieces of this process (live pieces x cameras): the "
            "read-ahead cannot keep every piece's next bytes, and decoders will wait a round trip for most decodes. "
            f"Pass ReadOptions(read_buffer='{need_mb}mb') or more, or keep fewer pieces live per process "
            "(StreamOptions(pool_size=), or more DataLoader workers)",
            RuntimeWarning,
            stacklevel=2,
        )

    def _chunk_bytes(self, entry: _Piece) -> int:
        """Bytes of a piece's camera asked for ahead of its reader: the read buffer's free half shared by the live
        pieces' cameras, half of it for what they asked and did not read yet (at most SEQUENTIAL_REQUEST_BYTES)."""
        budget = entry.reader.video_ahead.read_ahead.blocks.budget_bytes  # its source's (shared by sources alike)
        return min(SEQUENTIAL_REQUEST_BYTES, budget // 4 // max(1, self._live_cameras))


def decode_runs(starts: np.ndarray, ends: np.ndarray, run: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sample position p, the bytes [start, end) of positions p .. p + run - 1 together: a piece reader
    decodes the frames of the next `run` samples in one call when a sample misses its own (piece_reader.py)."""
    if run <= 1 or len(starts) == 0:
        return starts, ends
    pad = run - 1
    starts = np.concatenate([starts, np.full(pad, starts[-1])])
    ends = np.concatenate([ends, np.full(pad, ends[-1])])
    window = np.lib.stride_tricks.sliding_window_view
    return window(starts, run).min(axis=1), window(ends, run).max(axis=1)
