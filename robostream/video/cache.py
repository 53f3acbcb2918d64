"""VideoDecoderCache: an LRU of open decoders with exact hit/miss/eviction counts.

Opening a decoder costs a file open, a header parse and (torchcodec exact mode) a scan of the packet index, so a
loader that jumps between a few files should keep them open. The cache is thread-safe; each entry carries a lock
that serialises decoding on that decoder. It is per process: after a fork (DataLoader workers) the child starts
with an empty cache and fresh statistics instead of sharing the parent's open decoders.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from robostream.video.decoder import VideoDecoder, open_video_decoder

DecoderKey = tuple[str, str | None, str]  # (path, backend, device)

# Decoders a forked child inherited from its parent. They own FFmpeg threads (codec frame threads, swscale slice
# threads) that exist only in the parent, so freeing them in the child waits forever on those threads' condition
# variables (seen with PyAV): the child keeps them, unused, for its whole life (their pages stay shared).
_INHERITED: list = []


@dataclass
class _Entry:
    decoder: VideoDecoder
    lock: threading.Lock = field(default_factory=threading.Lock)


class VideoDecoderCache:
    """LRU cache of open video decoders keyed by (path, backend, device)."""

    def __init__(self, max_size: int = 32,
                 opener: Callable[[str, str | None, str], VideoDecoder] = open_video_decoder) -> None:
        if max_size < 1:
            raise ValueError(f"VideoDecoderCache max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._opener = opener
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        if getattr(self, "_entries", None):
            _INHERITED.extend(self._entries.values())
        self._pid = os.getpid()
        self._entries: OrderedDict[DecoderKey, _Entry] = OrderedDict()
        self._hits = self._misses = self._evictions = 0

    def _entry(self, path: str, backend: str | None, device: str) -> _Entry:
        key = (str(path), backend, device)
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            entry = self._entries.get(key)
            if entry is not None:
                self._hits += 1
                self._entries.move_to_end(key)
                return entry
            self._misses += 1
        # Open outside the lock: opening can take milliseconds and other threads may want other files.
        entry = _Entry(self._opener(str(path), backend, device))
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                # An evicted decoder still in use by another thread stays alive until that thread drops it.
                self._entries.popitem(last=False)
                self._evictions += 1
        return entry

    @contextmanager
    def use(self, path: str, backend: str | None = None, device: str = "cpu") -> Iterator[VideoDecoder]:
        """Borrow the decoder of `path`, opening it on a miss; decoding is exclusive while borrowed."""
        entry = self._entry(path, backend, device)
        with entry.lock:
            yield entry.decoder

    def stats(self) -> dict[str, float | int]:
        """hits, misses, evictions, hit_rate (hits / lookups, 0 before any lookup) and size (open decoders)."""
        with self._lock:
            lookups = self._hits + self._misses
            return {
                "hits": self._hits,
                "misses": self._misses,
                "evictions": self._evictions,
                "hit_rate": self._hits / lookups if lookups else 0.0,
                "size": len(self._entries),
            }

    def clear(self) -> None:
        """Drop every open decoder and zero the statistics."""
        with self._lock:
            self._reset()
