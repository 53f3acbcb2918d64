"""A per-process, byte-bounded cache of fetched file blocks shared by every reader and the read-ahead.

Readers (decoders, parquet) and the read-ahead's threads (storage/read_ahead.py) ask for the same (file, block)
keys; a block being fetched by one thread is waited for by the others, never fetched twice. Within `budget_bytes`:
- blocks fetched ahead and not read yet ("unread") are kept until a reader takes them: the read-ahead only fills
  the free half of the budget with them (`prefetch_room`), so fetching ahead never evicts a block before its use;
- blocks a reader has taken are kept least recently used first and are the ones evicted.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future

BlockKey = tuple[str, int]


class BlockCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._read: OrderedDict[BlockKey, bytes] = OrderedDict()  # taken by a reader, least recently used first
        self._unread: OrderedDict[BlockKey, bytes] = OrderedDict()  # fetched ahead, not taken yet
        self._inflight: dict[BlockKey, Future] = {}
        self._bytes = 0
        self._unread_bytes = 0
        self.peak_bytes = 0  # most bytes held at once
        self.wait_s = 0.0  # time readers spent waiting for blocks
        self.hits = self.misses = 0
        self.evicted_unread = 0  # blocks fetched ahead but evicted before a reader took them (budget too small)
        self.reader_fetches = 0  # blocks a reader had to fetch itself (nobody had asked for them ahead)
        self.read_ahead_bytes_taken = 0  # bytes of blocks fetched ahead that a reader then took
        self.on_taken: Callable[[], None] | None = None  # told when unread blocks were taken (room for more)

    def get(self, key: BlockKey, fetch: Callable[[], bytes]) -> bytes:
        """The block for `key`, for a reader: fetched with `fetch()` unless cached or already being fetched."""
        with self._lock:
            block, unread = self._take(key)
            if block is not None:
                self.hits += 1
        if block is not None:
            if unread:
                self._taken()
            return block
        with self._lock:
            future = self._inflight.get(key)
            owner = future is None
            if future is None:
                future = self._inflight[key] = Future()
                self.reader_fetches += 1
            self.misses += 1
        started = time.perf_counter()
        try:
            if owner:
                try:
                    block = fetch()
                except BaseException as exc:
                    self.fail(key, exc)
                    raise
                self.fulfil(key, block, ahead=False)
            else:
                block = future.result()
                with self._lock:  # a read-ahead's block: taken now
                    unread = self._take(key)[1]
                if unread:
                    self._taken()
        finally:
            with self._lock:
                self.wait_s += time.perf_counter() - started
        return block

    def _take(self, key: BlockKey) -> tuple[bytes | None, bool]:
        """A cached block, moved to the most recently used end of the taken blocks, and whether it was unread
        (lock held)."""
        block = self._read.get(key)
        if block is not None:
            self._read.move_to_end(key)
            return block, False
        block = self._unread.pop(key, None)
        if block is None:
            return None, False
        self._read[key] = block
        self._unread_bytes -= len(block)
        self.read_ahead_bytes_taken += len(block)
        return block, True

    def _taken(self) -> None:
        """Tell the read-ahead (outside this cache's lock: it takes its own lock, then asks this cache)."""
        if self.on_taken is not None:
            self.on_taken()

    def claim(self, keys: Iterable[BlockKey]) -> list[BlockKey]:
        """The keys neither cached nor being fetched, now marked as being fetched by the caller, who must
        `fulfil` or `fail` each (readers asking for them meanwhile wait for that)."""
        claimed = []
        with self._lock:
            for key in keys:
                if key not in self._read and key not in self._unread and key not in self._inflight:
                    self._inflight[key] = Future()
                    claimed.append(key)
        return claimed

    def fulfil(self, key: BlockKey, block: bytes, *, ahead: bool) -> None:
        """Store a claimed block (ahead: fetched by the read-ahead, kept until a reader takes it)."""
        with self._lock:
            future = self._inflight.pop(key, None)
            if key not in self._read and key not in self._unread:
                if ahead:
                    self._unread[key] = block
                    self._unread_bytes += len(block)
                else:
                    self._read[key] = block
                self._bytes += len(block)
                self.peak_bytes = max(self.peak_bytes, self._bytes)
                self._evict()
        if future is not None:
            future.set_result(block)

    def fail(self, key: BlockKey, exc: BaseException) -> None:
        """A claimed block could not be fetched: its waiters get the error, a later reader fetches it again."""
        with self._lock:
            future = self._inflight.pop(key, None)
        if future is not None:
            future.set_exception(exc)

    def _evict(self) -> None:
        """Drop taken blocks, least recently used first, then (only when the budget holds nothing else) the
        oldest unread ones, until within budget (lock held)."""
        while self._bytes > self.budget_bytes and len(self._read) + len(self._unread) > 1:
            if self._read:
                _, old = self._read.popitem(last=False)
            else:
                _, old = self._unread.popitem(last=False)
                self._unread_bytes -= len(old)
                self.evicted_unread += 1
            self._bytes -= len(old)

    def discard(self, name: str) -> None:
        """Forget the cached blocks of one file (keys (name, index)): its bytes proved wrong."""
        with self._lock:
            for store in (self._read, self._unread):
                for key in [k for k in store if k[0] == name]:
                    block = store.pop(key)
                    self._bytes -= len(block)
                    if store is self._unread:
                        self._unread_bytes -= len(block)

    def release(self, name: str, first: int, stop: int) -> None:
        """Blocks [first, stop) of file `name` fetched ahead will not be asked for by the reader that wanted them
        (its piece is done): those still unread become ordinary cached blocks, evictable, and leave room."""
        released = False
        with self._lock:
            for index in range(first, stop):
                block = self._unread.pop((name, index), None)
                if block is not None:
                    self._read[(name, index)] = block
                    self._unread_bytes -= len(block)
                    released = True
        if released:
            self._taken()

    def grow(self, budget_bytes: int) -> None:
        """Raise the budget to `budget_bytes` (never lowers it)."""
        with self._lock:
            self.budget_bytes = max(self.budget_bytes, budget_bytes)

    def cached(self, key: BlockKey) -> bool:
        """Whether the block is held or being fetched."""
        with self._lock:
            return key in self._read or key in self._unread or key in self._inflight

    def prefetch_room(self, pending: int = 0) -> bool:
        """Whether the read-ahead may fetch more: unread blocks plus `pending` bytes (fetches under way) stay
        within the free half of the budget, so fetching ahead never evicts blocks in use."""
        with self._lock:
            return self._unread_bytes + pending < self.budget_bytes // 2

    @property
    def unread_bytes(self) -> int:
        with self._lock:
            return self._unread_bytes

    @property
    def resident_bytes(self) -> int:
        with self._lock:
            return self._bytes
