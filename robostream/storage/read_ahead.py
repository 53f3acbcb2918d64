"""Byte ranges of remote files fetched ahead of their readers, many requests in flight, in the order asked for.

A reader of a remote file pays a round trip (20-100 ms on object storage) for every block it misses. The datasets
know which bytes their decoders will read next (storage gets them as plain ranges of files) and hand them here:
- `fetch(reader, start, end, need="now")`: needed now (the map-style batch being decoded); marked as being
  fetched at once, so a decoder asking for them waits for this fetch instead of making its own, and served first.
- `fetch(..., need="soon")`: needed soon (a streaming consumer's next picks); fetched in the order submitted, as
  long as the blocks fetched ahead and not read yet stay within the free half of the read buffer
  (BlockCache.prefetch_room): fetching ahead never evicts a block before its use, and memory stays bounded.
- `fetch(..., need="later")`: further ahead (the rest of a piece read forward, in large requests); as "soon", after
  every "soon" request waiting, so a large range never holds back the next samples' bytes.

Ranges are cut into block-aligned requests of up to `request_bytes`, contiguous missing blocks merged, and run on up
to `max_in_flight` threads (each request one ranged GET on the filesystem's event loop). How far ahead a consumer
should ask is Little's law: bytes ahead = rate the readers take them x time a request takes (`depth_bytes`, both
measured here), so the requests in flight cover the store's latency at the rate the decoders consume.

A read-ahead request that fails is counted (`failures`) and left to the reader: its own read of the same block
retries under the same policy and raises the error where the sample needs the bytes.

When the store throttles (429, or S3's 503 SlowDown: it wants fewer requests per second), every request of the
process slows down, not only the one that met it: `throttled()` halves the requests allowed in flight, and each
round of that many answered requests allows one more again, up to `max_in_flight` (additive increase,
multiplicative decrease, as TCP and the AWS SDKs' adaptive retry mode back off).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from robostream.storage.blocks import BlockCache, BlockKey

# Requests under way at once per process, at most: threads start only while requests wait (a worker's first batch
# asks for a span per live piece and camera at once; later it needs about take rate x request time / request size).
DEFAULT_MAX_IN_FLIGHT = 64
REQUEST_BYTES = 2 << 20  # most bytes of one merged request: per connection ~20 ms of transfer at 100 MB/s
# Most bytes of one request of a forward read (a streaming piece), asked for with `request_bytes`: object stores
# cap requests per second per key prefix (S3: 5,500 GETs/s) and advise 8-16 MB ranges.
SEQUENTIAL_REQUEST_BYTES = 16 << 20
EWMA = 0.2  # weight of the newest measurement

Need = Literal["now", "soon", "later"]
URGENCY: dict[Need, int] = {"now": 0, "soon": 1, "later": 2}


class RangeSource(Protocol):
    """What the read-ahead needs of a file: a key for its blocks, the block size and file size, and a checked,
    retried, counted fetch of a byte range (RangedReader)."""

    key: str

    @property
    def block_size(self) -> int: ...

    def size(self) -> int: ...

    def fetch_range(self, start: int, end: int) -> bytes: ...


@dataclass(eq=False)
class _Task:
    urgency: int  # URGENCY of its Need
    seq: int
    source: RangeSource
    first: int  # first block
    stop: int  # block after the last
    claimed: bool  # "now" tasks claim their blocks when submitted

    def __lt__(self, other: _Task) -> bool:
        return (self.urgency, self.seq) < (other.urgency, other.seq)


class ReadAhead:
    """One process's fetches ahead of the readers of one storage (threads do not survive a fork)."""

    def __init__(
        self, blocks: BlockCache, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, request_bytes: int = REQUEST_BYTES
    ) -> None:
        self.blocks = blocks
        self.max_in_flight = max(1, max_in_flight)
        self.request_bytes = request_bytes
        self._cond = threading.Condition()
        self._queue: list[_Task] = []
        self._queued_bytes = 0  # bytes of tasks waiting (ahead only)
        self._pending = 0  # bytes of ahead requests under way
        self._seq = itertools.count()
        self._threads = 0
        self._idle = 0
        self.in_flight = 0
        self.in_flight_peak = 0
        self.allowed = self.max_in_flight  # requests allowed under way at once (fewer after a throttle)
        self.allowed_low = 0  # the fewest allowed after a throttle (0: never throttled)
        self._answered_since_cut = 0
        self._later_busy = 0  # "later" requests under way
        self.requests = 0
        self.failures = 0
        self.request_s = 0.0  # EWMA of one request's time (first byte + transfer)
        self.take_rate = 0.0  # EWMA of bytes/s readers take from what was fetched ahead
        self._taken_mark = (time.perf_counter(), 0)
        blocks.on_taken = self._wake

    # -- what the datasets call ------------------------------------------------------------------------------
    def fetch(self, source: RangeSource, start: int, end: int, *, need: Need, request_bytes: int | None = None) -> None:
        """Fetch bytes [start, end) of `source` into the block cache, in the background, in requests of at most
        `request_bytes` (default: the read-ahead's `request_bytes`); `need` orders them (module docstring)."""
        end = min(end, source.size())
        if end <= start:
            return
        size = source.block_size
        first, stop = start // size, -(-end // size)
        per_request = max(1, (request_bytes or self.request_bytes) // size)
        tasks = []
        if need == "now":
            claimed = [index for _, index in self.blocks.claim((source.key, i) for i in range(first, stop))]
            for run in _runs(claimed, per_request):
                tasks.append(_Task(0, next(self._seq), source, run[0], run[-1] + 1, True))
        else:
            for lo in range(first, stop, per_request):
                hi = min(stop, lo + per_request)
                if not all(self.blocks.cached((source.key, i)) for i in range(lo, hi)):
                    tasks.append(_Task(URGENCY[need], next(self._seq), source, lo, hi, False))
        if not tasks:
            return
        with self._cond:
            for task in tasks:
                heapq.heappush(self._queue, task)
                if not task.claimed:
                    self._queued_bytes += (task.stop - task.first) * size
            while self._threads < self.max_in_flight and self._idle < len(self._queue):
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._run, name="robostream-read-ahead", daemon=True).start()
            self._cond.notify(len(tasks))

    def throttled(self) -> None:
        """The store asked for fewer requests: half as many allowed in flight (at least one)."""
        with self._cond:
            self.allowed = max(1, self.allowed // 2)
            self.allowed_low = min(self.allowed_low or self.allowed, self.allowed)
            self._answered_since_cut = 0

    def ahead_bytes(self) -> int:
        """Bytes asked for ahead and not yet taken by a reader: queued, under way, or fetched and unread."""
        with self._cond:
            queued = self._queued_bytes + self._pending
        return queued + self.blocks.unread_bytes

    def depth_bytes(self, floor: int) -> int:
        """How many bytes a consumer should keep asked for ahead (Little's law, with 2x headroom for bursts): the
        rate readers take fetched bytes x the time a request takes, at least `floor`, within the free half of the
        read buffer."""
        wanted = 2 * self.take_rate * self.request_s
        return int(min(self.blocks.budget_bytes // 2, max(floor, wanted)))

    def stats(self) -> dict[str, float]:
        with self._cond:
            return {
                "read_ahead_requests": self.requests,
                "read_ahead_failures": self.failures,
                "read_ahead_in_flight_peak": self.in_flight_peak,
                "request_ms": 1e3 * self.request_s,
                "take_mb_s": self.take_rate / 1e6,
            }

    # -- threads ---------------------------------------------------------------------------------------------
    def _wake(self) -> None:
        """Readers took blocks fetched ahead: room for more, and a measure of how fast they read."""
        now = time.perf_counter()
        with self._cond:
            mark_t, mark_bytes = self._taken_mark
            taken = self.blocks.read_ahead_bytes_taken
            if now - mark_t >= 0.25:  # rate over quarter-second windows (a single block says nothing)
                rate = (taken - mark_bytes) / (now - mark_t)
                self.take_rate = rate if not self.take_rate else (1 - EWMA) * self.take_rate + EWMA * rate
                self._taken_mark = (now, taken)
            # Only a queued task can use the room. Called for every block a decoder takes: a thread woken for
            # nothing costs a wake-up and a GIL hand-over (the read-ahead's threads' CPU -13% in a 400-batch pass).
            if self._queue:
                self._cond.notify()

    def _next(self) -> _Task:
        """The next task this thread may run, while fewer than `allowed` are under way: a "now" one, or one ahead
        when the buffer has room ("later" ones within half of `allowed`)."""
        with self._cond:
            while True:
                busy = self._threads - self._idle  # tasks taken by the other threads
                if self._queue and busy < self.allowed:
                    head = self._queue[0]
                    nbytes = (head.stop - head.first) * head.source.block_size
                    # "later" ranges take at most half the requests allowed: the others stay free for the
                    # "soon" and "now" ones that arrive while they transfer
                    later_ok = head.urgency < URGENCY["later"] or 2 * self._later_busy < self.allowed
                    if later_ok and (head.claimed or self.blocks.prefetch_room(self._pending + nbytes)):
                        heapq.heappop(self._queue)
                        self._idle -= 1
                        self._later_busy += head.urgency == URGENCY["later"]
                        if not head.claimed:
                            self._queued_bytes -= nbytes
                            self._pending += nbytes
                        return head
                # Waits for a new task, or, with tasks queued, for readers taking or releasing blocks and for
                # requests ending (each notifies); the budget growing or blocks evicted unread wake nobody, and a
                # waiting task then goes at the next of those or the timeout, which also bounds how long an idle
                # thread lingers.
                if not self._cond.wait(timeout=30.0) and not self._queue:
                    self._threads -= 1
                    self._idle -= 1
                    raise _Idle

    def _run(self) -> None:
        while True:
            try:
                task = self._next()
            except _Idle:
                return
            try:
                self._do(task)
            finally:
                with self._cond:
                    if not task.claimed:
                        self._pending -= (task.stop - task.first) * task.source.block_size
                    self._later_busy -= task.urgency == URGENCY["later"]
                    self._idle += 1
                    if self._queue:  # a queued task may go now: a request slot, its room or a "later" slot freed
                        self._cond.notify()

    def _do(self, task: _Task) -> None:
        source, size = task.source, task.source.block_size
        indices = list(range(task.first, task.stop))
        if not task.claimed:
            indices = [index for _, index in self.blocks.claim((source.key, i) for i in indices)]
        mine = set(indices)  # a request may span blocks others claimed: only these are this task's to fill
        for run in _requests(indices):
            keys: list[BlockKey] = [(source.key, i) for i in run if i in mine]
            start, end = run[0] * size, min(source.size(), (run[-1] + 1) * size)
            with self._cond:
                self.in_flight += 1
                self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
            began = time.perf_counter()
            try:
                data = source.fetch_range(start, end)
            except BaseException as exc:
                with self._cond:
                    self.failures += 1
                for key in keys:
                    self.blocks.fail(key, exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            finally:
                with self._cond:
                    self.in_flight -= 1
            took = time.perf_counter() - began
            with self._cond:
                self.requests += 1
                self.request_s = took if not self.request_s else (1 - EWMA) * self.request_s + EWMA * took
                self._answered_since_cut += 1
                if self.allowed < self.max_in_flight and self._answered_since_cut >= self.allowed:
                    self.allowed += 1
                    self._answered_since_cut = 0
                    self._cond.notify()
            for key in keys:
                offset = (key[1] - run[0]) * size
                self.blocks.fulfil(key, data[offset : offset + size], ahead=not task.claimed)


class _Idle(Exception):
    """A read-ahead thread found nothing to do for a while and ends."""


def _requests(indices: Sequence[int]) -> list[list[int]]:
    """The requests that fetch a task's claimed blocks (sorted): one per run of consecutive blocks, or one for the
    whole span when the blocks others claimed in between (a decoder that overtook the queued range fetches its
    block itself) are at most a quarter of it: a request costs more than a few blocks fetched twice (object stores
    cap requests per second per key prefix), and the blocks in between are not filled twice (see `_do`)."""
    if not indices:
        return []
    span = indices[-1] - indices[0] + 1
    if span - len(indices) <= span // 4:
        return [list(indices)] if span == len(indices) else [list(range(indices[0], indices[-1] + 1))]
    return _runs(indices, len(indices))


def _runs(indices: Sequence[int], most: int) -> list[list[int]]:
    """Sorted block indices grouped into runs of consecutive indices, each at most `most` long."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1 and len(runs[-1]) < most:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs
