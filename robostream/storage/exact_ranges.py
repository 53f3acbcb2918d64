"""Byte ranges of remote files fetched exactly as asked (not in blocks), many at once, for the decoders that take them.

A map-style batch knows the packets each of its frames needs (video/packet_index.py): a few KB per camera frame,
anywhere in the file. Fetched through the block cache they would cost at least a 64 KiB block each; here each range
is one ranged GET of exactly its bytes (`RangedReader.fetch_range`: checked, retried, If-Match on the file's
version), ranges that overlap or touch merged first, all of them in flight at once on this process's threads. The
decoders then `take` the bytes they need; a range nobody asked for ahead is fetched by the taker itself (one round
trip). Ranges are kept within `budget_bytes`: those whose last bytes were taken go first, oldest first; one not taken
yet (a batch's, or one a look-ahead sampler named) goes only past twice the budget, the newest first. This budget
comes on top of the block cache's (`read_buffer`): a quarter of it, up to half.

A range whose fetch failed gives its error to every taker (the error names the file and the range).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

CANDIDATES = 8  # ranges starting at or before a wanted start that are checked for covering it (asks overlap rarely)
# Most bytes of a range merged from several spans (within the budget too): a batch of consecutive frames (GOP 2: each
# frame's span ends where the next keyframe's starts) would otherwise chain into one GET, every take waiting for all
# of it at one connection's rate, and one range past twice the budget is dropped before any of it is taken.
MERGED_BYTES = 2 << 20


class RangeSource(Protocol):
    """A remote file's version whose bytes can be fetched by range (storage/store.py's RangedReader)."""

    @property
    def key(self) -> str: ...

    def fetch_range(self, start: int, end: int) -> bytes: ...


def merged(spans: Iterable[tuple[int, int]], *, gap: int = 0, most: int | None = None) -> list[tuple[int, int]]:
    """Spans [start, end) sorted, those that overlap, touch or lie at most `gap` bytes apart merged into one, while
    the merged range stays within `most` bytes (None: no bound; a span longer than that stays whole)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] <= gap and (most is None or max(end, out[-1][1]) - out[-1][0] <= most):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@dataclass
class _Range:
    end: int
    bytes_of: Future
    taken: bool = False


class _File:
    """One file version's ranges asked for, by start."""

    def __init__(self) -> None:
        self.starts: list[int] = []  # sorted
        self.ranges: dict[int, _Range] = {}


class ExactRanges:
    """Exact byte ranges of remote files, fetched ahead concurrently and kept within a byte budget (per process)."""

    def __init__(self, *, budget_bytes: int, threads: int) -> None:
        """
        Args:
            budget_bytes: the bytes of ranges kept (asked for, fetched or not): past it those taken go, oldest
                first; past twice it, those not taken yet too.
            threads: requests under way at once at most.
        """
        self.budget_bytes = budget_bytes
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None  # started at the first fetch
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}
        self._order: deque[tuple[str, int, _Range]] = deque()  # (file key, start, range) in the order asked
        self._bytes = 0
        self.taken_ahead = self.taken_late = 0  # takes served by a range asked ahead / fetched by the taker
        self.bytes_asked = 0  # bytes of the ranges asked for ahead (merged)

    def fetch(self, source: RangeSource, spans: Iterable[tuple[int, int]]) -> None:
        """Fetch these spans of `source` in the background (merged; those already held are not asked again)."""
        wanted = merged(spans, most=min(MERGED_BYTES, self.budget_bytes))
        if not wanted:
            return
        with self._lock:
            file = self._files.setdefault(source.key, _File())
            for start, end in wanted:
                covering = self._covering(file, start, end)
                if covering is not None:
                    covering[1].taken = False  # wanted again (a look-ahead batch): kept as not taken
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="robostream-exact")
                self._hold(source.key, file, start, _Range(end, self._pool.submit(source.fetch_range, start, end)))
                self.bytes_asked += end - start
            self._trim()

    def take(self, source: RangeSource, start: int, end: int) -> bytes:
        """Bytes [start, end) of `source`: from a range asked for ahead (waiting for it if under way), else fetched
        now and kept."""
        with self._lock:
            file = self._files.get(source.key)
            found = self._covering(file, start, end) if file is not None else None
            if found is not None:
                self.taken_ahead += 1
                # Its last bytes taken: its frames are decoded (a run takes them in file order); a merged range's
                # first frames leave it held for the others.
                found[1].taken = found[1].taken or end >= found[1].end
            else:
                self.taken_late += 1
        if found is not None:
            first, held = found
            try:
                return held.bytes_of.result()[start - first : end - first]
            except BaseException:
                with self._lock:  # a later take asks again (the error named the file and the range)
                    self._forget(source.key, first, held)
                raise
        data = source.fetch_range(start, end)
        done: Future = Future()
        done.set_result(data)
        with self._lock:
            self._hold(source.key, self._files.setdefault(source.key, _File()), start, _Range(end, done, taken=True))
            self._trim()
        return data

    def _covering(self, file: _File, start: int, end: int) -> tuple[int, _Range] | None:
        """A held range holding [start, end) (lock held)."""
        at = bisect.bisect_right(file.starts, start)
        for first in reversed(file.starts[max(0, at - CANDIDATES) : at]):
            held = file.ranges[first]
            if end <= held.end:
                return first, held
        return None

    def _hold(self, key: str, file: _File, start: int, held: _Range) -> None:
        """Keep a range (lock held); one already held at the same start is replaced."""
        old = file.ranges.get(start)
        if old is not None:
            self._bytes -= old.end - start
        else:
            bisect.insort(file.starts, start)
        file.ranges[start] = held
        self._order.append((key, start, held))
        self._bytes += held.end - start

    def _forget(self, key: str, start: int, held: _Range) -> None:
        """Drop `held`, the range at `start`, if it still is (lock held)."""
        file = self._files.get(key)
        if file is None or file.ranges.get(start) is not held:
            return
        del file.ranges[start]
        file.starts.remove(start)
        self._bytes -= held.end - start
        if not file.ranges:
            del self._files[key]

    def _trim(self) -> None:
        """Within budget (lock held): the ranges taken go, oldest first; past twice the budget, then those not taken
        yet, newest first (the batches furthest ahead: the current one's are the oldest)."""
        if self._bytes <= self.budget_bytes:
            return
        kept: deque[tuple[str, int, _Range]] = deque()
        while self._order and self._bytes > self.budget_bytes:
            key, start, held = self._order.popleft()
            if self._held(key, start, held):
                if held.taken:
                    self._drop(key, start, held)
                else:
                    kept.append((key, start, held))
        while kept and self._bytes > 2 * self.budget_bytes:
            self._drop(*kept.pop())
        self._order.extendleft(reversed(kept))

    def _held(self, key: str, start: int, held: _Range) -> bool:
        """Whether `held` is still the range kept at `start` (not replaced or forgotten since; lock held)."""
        file = self._files.get(key)
        return file is not None and file.ranges.get(start) is held

    def _drop(self, key: str, start: int, held: _Range) -> None:
        """Forget a range to stay within budget, its request cancelled if not started yet (lock held)."""
        held.bytes_of.cancel()
        self._forget(key, start, held)
