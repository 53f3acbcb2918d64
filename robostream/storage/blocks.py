"""A per-process, byte-bounded cache of fetched file blocks shared by every reader and the prefetcher.

Readers (decoders, parquet) and background prefetch threads ask for the same (file, block) keys; a block being
fetched by one thread is waited for by the others, never fetched twice. Completed blocks are kept least recently
used first within `budget_bytes`, which bounds the memory that remote reading and prefetching can take.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

BlockKey = tuple[str, int]


class BlockCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._done: OrderedDict[BlockKey, bytes] = OrderedDict()
        self._inflight: dict[BlockKey, Future] = {}
        self._bytes = 0
        self.peak_bytes = 0  # most bytes held at once
        self.wait_s = 0.0  # time readers (not prefetch) spent waiting for blocks
        self.hits = self.misses = 0

    def get(self, key: BlockKey, fetch: Callable[[], bytes], reader: bool = True) -> bytes:
        """The block for `key`, fetching it with `fetch()` unless cached or already being fetched."""
        with self._lock:
            block = self._done.get(key)
            if block is not None:
                self._done.move_to_end(key)
                self.hits += reader
                return block
            future = self._inflight.get(key)
            owner = future is None
            if owner:
                future = self._inflight[key] = Future()
            self.misses += reader
        started = time.perf_counter()
        try:
            if owner:
                try:
                    block = fetch()
                except BaseException as exc:
                    future.set_exception(exc)
                    raise
                future.set_result(block)
                self._store(key, block)
            else:
                block = future.result()
        finally:
            if owner:
                with self._lock:
                    self._inflight.pop(key, None)
            if reader:
                with self._lock:
                    self.wait_s += time.perf_counter() - started
        return block

    def _store(self, key: BlockKey, block: bytes) -> None:
        with self._lock:
            if key in self._done:
                return
            self._done[key] = block
            self._bytes += len(block)
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            while self._bytes > self.budget_bytes and len(self._done) > 1:
                _, old = self._done.popitem(last=False)
                self._bytes -= len(old)

    def discard(self, name: str) -> None:
        """Forget the completed blocks of one file (keys (name, index)): its bytes proved wrong."""
        with self._lock:
            for key in [k for k in self._done if k[0] == name]:
                self._bytes -= len(self._done.pop(key))

    def has_room_for_prefetch(self) -> bool:
        """Prefetch only into the free half of the budget, so fetching ahead never evicts blocks in use."""
        with self._lock:
            return self._bytes < self.budget_bytes // 2

    @property
    def resident_bytes(self) -> int:
        with self._lock:
            return self._bytes
