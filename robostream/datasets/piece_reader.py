"""Decoded frames of one live piece, kept exactly as long as a later sample of the piece still needs them.

A piece's samples are emitted in a known order (see plan/schedule.py), so for every frame the last sample that
uses it is known in advance: frames are decoded in small look-ahead batches (one decoder call per camera for the
next `decode_ahead` samples' missing frames) and dropped right after their last use. Overlapping windows therefore
decode each frame about once, and memory per live piece stays at the window's working set plus the look-ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from robostream.format.data_rows import EpisodeRows

# (episode rows, frames by camera) -> uint8 (N, C, H, W) per camera
Decode = Callable[[EpisodeRows, Mapping[str, np.ndarray]], dict[str, torch.Tensor]]


class PieceReader:
    """Frames of one piece of one episode, for samples taken in `sample_frames` order."""

    def __init__(
        self,
        rows: EpisodeRows,
        sample_frames: np.ndarray,
        needed_frames: Mapping[str, np.ndarray],
        decode: Decode,
        decode_ahead: int,
        *,
        source: int = 0,
        decoded_all: Callable[[], None] | None = None,
    ) -> None:
        """needed_frames[key] is (len(sample_frames), T): the frames each sample needs from camera `key`;
        source: the mixture source the piece belongs to; decoded_all: called once, when the piece has decoded every
        frame its samples need (its decoders can close)."""
        self.rows = rows
        self.source = source
        self.sample_frames = sample_frames
        self.needed = dict(needed_frames)
        self._decode = decode
        self._decoded_all = decoded_all
        self.decode_ahead = max(1, decode_ahead)
        self.frames: dict[str, dict[int, torch.Tensor]] = {k: {} for k in self.needed}
        self.resident = 0  # decoded frames held now, all cameras
        # Positions below this one (from the next to emit) have all their frames held: each decode covers every
        # frame the samples of [first, stop) miss, and a frame is dropped only after its last use, so held-ness is
        # known per piece without looking frames up.
        self._ready = 0
        # Frames some sample needs that were not decoded yet, all cameras: 0 once the piece needs no decoder.
        self.undecoded = 0
        # Per camera and sample, as lists (looked up per sample, not converted per sample): its window's frames,
        # and which of them no later sample uses; flat, T per sample (a list per sample made thousands of objects
        # per piece for the garbage collector to count: a full collection at a pass's start took 0.17 s in-process).
        self._width = {key: per_sample.shape[1] for key, per_sample in self.needed.items()}
        self._rows: dict[str, list[int]] = {}
        self._last: dict[str, list[bool]] = {}
        for key, per_sample in self.needed.items():
            positions = np.repeat(np.arange(len(per_sample)), per_sample.shape[1])
            flat = per_sample.reshape(-1)
            # A frame's last use: its first occurrence in the reversed order.
            frames, first_from_end = np.unique(flat[::-1], return_index=True)
            last_use = positions[::-1][first_from_end]
            self.undecoded += len(frames)
            self._rows[key] = flat.tolist()
            self._last[key] = (last_use[np.searchsorted(frames, flat)] == positions).tolist()

    def window_frames(self, position: int, released: list[torch.Tensor] | None = None) -> dict[str, list[torch.Tensor]]:
        """Per camera the T decoded (C, H, W) frames of the sample at `position`, then forget frames no longer
        needed (the batch path copies them straight into the batch, a sample stacks them); forgotten frames are
        appended to `released` when given."""
        if position >= self._ready:
            wanted, self._ready = self._ahead(position)
            if wanted:
                self.add(wanted, self._decode(self.rows, wanted))
        out = {}
        for key, store in self.frames.items():
            width = self._width[key]
            first = position * width
            rows = self._rows[key][first : first + width]
            out[key] = [store[r] for r in rows]
            for row, last in zip(rows, self._last[key][first : first + width]):
                if last:
                    frame = store.pop(row, None)  # None: the window repeats the frame (padding)
                    if frame is not None:
                        self.resident -= 1
                        if released is not None:
                            released.append(frame)
        return out

    def missing(self, positions: Sequence[int], *, ahead: int | None = None) -> dict[str, np.ndarray]:
        """What to decode before the samples at `positions` (this piece's samples of one batch, in emitted order):
        nothing ({}) when their frames are all held, else per camera the frames not held yet of the samples from
        the first one not held through the last of `positions`, at least `ahead` samples (default decode_ahead;
        one decoder call per camera for all of them, none left for `window_frames` to decode alone)."""
        last = max(positions, default=-1)
        if last < self._ready:
            return {}
        first = max(min(positions), self._ready)
        wanted, self._ready = self._ahead(first, stop=max(last + 1, first + (ahead or self.decode_ahead)))
        return wanted

    def _ahead(self, position: int, stop: int | None = None) -> tuple[dict[str, np.ndarray], int]:
        """Per camera the frames not held yet of the samples from `position` to `stop` (default: `decode_ahead`
        of them), and where that range ends: once they are added, every position before it is held."""
        end = min(position + self.decode_ahead if stop is None else stop, len(self.sample_frames))
        wanted = {}
        for key, rows in self.needed.items():
            store = self.frames[key]
            todo = [r for r in np.unique(rows[position:end]).tolist() if r not in store]
            if todo:
                wanted[key] = np.asarray(todo, dtype=np.int64)
        return wanted, end

    def add(
        self, wanted: Mapping[str, np.ndarray], decoded: Mapping[str, torch.Tensor | Sequence[torch.Tensor]]
    ) -> None:
        """Hold the frames decoded for `missing`'s answer: decoded[key] holds a uint8 (C, H, W) frame for each
        of wanted[key] (an (N, C, H, W) tensor or a list)."""
        for key, frames in decoded.items():
            for row, frame in zip(wanted[key].tolist(), frames):
                self.frames[key][row] = frame
            self.resident += len(wanted[key])
            self.undecoded -= len(wanted[key])  # each frame is decoded once: never again after its last use
        if not self.undecoded and self._decoded_all is not None:
            self._decoded_all()
            self._decoded_all = None
