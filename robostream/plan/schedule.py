"""The sample order inside one canonical stream: a pool of live pieces interleaved at random.

A stream is a list of pieces (contiguous frame ranges of episodes). Up to `pool_size` pieces are live at once; each
step picks one live piece uniformly at random and emits its next sample, and a finished piece is replaced by the
next one in the list. Every piece is read forward, so its video is decoded close to sequentially, and the frames a
piece still needs can be kept and reused. Within a piece, samples are visited by residue class of the window stride
(see `piece_sample_order`), so overlapping windows share frames with a small working set.

Pure and deterministic: the same inputs and rng seed give the same schedule in every process, and a resume simply
regenerates the schedule and skips what was already emitted (vectorised, no decoding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import reduce

import numpy as np

CHUNK = 8192


def window_stride(camera_offsets: Sequence[np.ndarray]) -> int:
    """gcd of the differences between the frame offsets of the camera windows (1 without windows).

    With windows spaced `g` frames apart (sarm: 1 s = 20 frames), samples whose frames are congruent mod g share
    frames; visiting them in that order keeps only span/g + 1 frames per camera alive instead of span + 1.
    """
    diffs = [abs(int(d)) for off in camera_offsets for d in np.asarray(off) - np.asarray(off)[0] if d]
    return reduce(math.gcd, diffs, 0) or 1


def piece_sample_order(start: int, stop: int, stride: int) -> np.ndarray:
    """Frames of a piece ordered by (frame mod stride, frame): chronological when stride is 1."""
    frames = np.arange(start, stop, dtype=np.int64)
    if stride <= 1:
        return frames
    return frames[np.lexsort((frames, frames % stride))]


def pool_schedule(piece_lengths: Sequence[int], pool_size: int, rng: np.random.Generator | None,
                  chunk: int = CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield chunks of (piece id, position within the piece's sample order) covering every sample once.

    With `rng=None` pieces are read one after the other (chronological).
    """
    lengths = np.asarray(piece_lengths, dtype=np.int64)
    if rng is None or pool_size <= 1:
        for piece, length in enumerate(lengths):
            for start in range(0, int(length), chunk):
                positions = np.arange(start, min(int(length), start + chunk), dtype=np.int64)
                yield np.full(len(positions), piece, dtype=np.int64), positions
        return
    live: list[int] = []
    next_piece = 0
    while len(live) < pool_size and next_piece < len(lengths):
        if lengths[next_piece] > 0:
            live.append(next_piece)
        next_piece += 1
    progress = {p: 0 for p in live}
    while live:
        draws = rng.random(chunk)
        out_piece, out_pos = [], []
        while len(draws) and live:
            remaining = np.array([lengths[p] - progress[p] for p in live])
            # No piece can finish within min(remaining) picks; look about as far as the first finish is expected.
            window = draws[: max(64, int(remaining.min()) * len(live))]
            slots = (window * len(live)).astype(np.int64)
            counts = np.zeros((len(window), len(live)), dtype=np.int64)
            counts[np.arange(len(window)), slots] = 1
            cumulative = np.cumsum(counts, axis=0)
            finished = cumulative >= remaining[None, :]
            steps = len(window)
            if finished.any():
                steps = int(np.flatnonzero(finished.any(axis=1))[0]) + 1  # up to the first finishing pick
            taken = slots[:steps]
            within = cumulative[np.arange(steps), taken] - 1
            pieces = np.asarray(live, dtype=np.int64)[taken]
            out_piece.append(pieces)
            out_pos.append(np.array([progress[p] for p in live], dtype=np.int64)[taken] + within)
            for slot, count in zip(*np.unique(taken, return_counts=True)):
                progress[live[slot]] += int(count)
            draws = draws[steps:]
            done = [slot for slot, p in enumerate(live) if progress[p] >= lengths[p]]
            for slot in reversed(done):
                del progress[live[slot]]
                while next_piece < len(lengths) and lengths[next_piece] == 0:
                    next_piece += 1
                if next_piece < len(lengths):
                    live[slot] = next_piece
                    progress[next_piece] = 0
                    next_piece += 1
                else:
                    live.pop(slot)
        if out_piece:
            yield np.concatenate(out_piece), np.concatenate(out_pos)


def take(chunks: Iterator[tuple[np.ndarray, np.ndarray]], skip: int, limit: int | None
         ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Drop the first `skip` scheduled samples and stop after `limit` more (None: no limit)."""
    seen = 0
    for pieces, positions in chunks:
        lo, hi = max(0, skip - seen), len(pieces)
        if limit is not None:
            hi = min(hi, skip + limit - seen)
        seen += len(pieces)
        if lo < hi:
            yield pieces[lo:hi], positions[lo:hi]
        if limit is not None and seen >= skip + limit:
            return
