"""VideoDecoderCache: an LRU of open decoders with exact hit/miss/eviction counts.

Opening a decoder costs a file open, a header parse and (torchcodec exact mode) a scan of the packet index, so a
loader that jumps between a few files should keep them open. The cache is thread-safe; each entry carries a lock
that serialises decoding on that decoder. It is per process (process_local.py): after a fork (DataLoader workers)
the child starts with an empty cache and fresh statistics; the parent's decoders are kept, unused, never freed in
the child (freeing FFmpeg objects whose threads live in the parent hangs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from robostream.process_local import ProcessLocal
from robostream.video.decoder import PyAVVideoDecoder, VideoDecoder, open_video_decoder

DecoderKey = tuple[str, str | None, str]  # (path, backend, device)


@dataclass
class _Entry:
    decoder: VideoDecoder
    lock: threading.Lock = field(default_factory=threading.Lock)


class _State:
    """One process's open decoders, statistics and lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[DecoderKey, _Entry] = OrderedDict()
        self.held = 0  # decoders of live pieces kept open beyond max_size (see VideoDecoderCache.hold)
        self.hits = self.misses = self.evictions = 0
        self.evicted_calls = self.evicted_seeks = 0  # decoding counts of decoders no longer open

    def dropped(self, entry: _Entry) -> None:
        """Keep the decoding counts of a decoder no longer open (caller holds the lock)."""
        self.evicted_calls += entry.decoder.calls
        self.evicted_seeks += entry.decoder.seeks


class VideoDecoderCache:
    """LRU cache of open video decoders keyed by (path, backend, device).

    One cache may serve many datasets (the sources of a mixture): then each use names the file by its full location
    and brings its own opener, and the readers `hold` room for the decoders of the pieces they have live, so the
    open decoders (and file descriptors) are bounded by the live pieces, not by the sources a process has seen.
    """

    def __init__(
        self, max_size: int = 32, opener: Callable[[str, str | None, str], VideoDecoder] = open_video_decoder
    ) -> None:
        if max_size < 1:
            raise ValueError(f"VideoDecoderCache max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._opener = opener
        self._state = ProcessLocal(_State)

    def _entry(self, path: str, backend: str | None, device: str, opener: Callable[[], VideoDecoder] | None) -> _Entry:
        key = (str(path), backend, device)
        state = self._state.get()
        with state.lock:
            entry = state.entries.get(key)
            if entry is not None:
                state.hits += 1
                state.entries.move_to_end(key)
                return entry
            state.misses += 1
        # Open outside the lock: opening can take milliseconds and other threads may want other files.
        entry = _Entry(opener() if opener is not None else self._opener(str(path), backend, device))
        with state.lock:
            state.entries[key] = entry
            state.entries.move_to_end(key)
            self._evict(state)
        return entry

    def _evict(self, state: _State) -> None:
        """Close the least recently used decoders beyond max_size plus those held (caller holds the lock)."""
        while len(state.entries) > self.max_size + state.held:
            # An evicted decoder still in use by another thread stays alive until that thread drops it.
            _, evicted = state.entries.popitem(last=False)
            state.evictions += 1
            state.dropped(evicted)

    @contextmanager
    def use(
        self,
        path: str,
        backend: str | None = None,
        device: str = "cpu",
        *,
        opener: Callable[[], VideoDecoder] | None = None,
    ) -> Iterator[VideoDecoder]:
        """Borrow the decoder of `path`, opening it on a miss (with `opener` when given, else the cache's);
        decoding is exclusive while borrowed."""
        entry = self._entry(path, backend, device, opener)
        with entry.lock:
            yield entry.decoder

    def close(self, path: str, backend: str | None = None, device: str = "cpu") -> None:
        """Close the decoder of `path` now if it is open (a file no piece will read again); one in use by another
        thread stays alive until that thread drops it."""
        state = self._state.get()
        with state.lock:
            entry = state.entries.pop((str(path), backend, device), None)
            if entry is None:
                return
            state.dropped(entry)
        # A PyAV container dropped waits in a reference cycle for the collector: closed here when nobody decodes.
        if isinstance(entry.decoder, PyAVVideoDecoder) and entry.lock.acquire(blocking=False):
            try:
                entry.decoder.close()
            finally:
                entry.lock.release()

    def hold(self, decoders: int) -> None:
        """Keep room for `decoders` more open decoders in this process (negative: give that room back): those of
        the pieces a reader has live. The least recently used beyond max_size plus what is held are closed."""
        state = self._state.get()
        with state.lock:
            state.held = max(0, state.held + decoders)
            self._evict(state)

    def stats(self) -> dict[str, float | int]:
        """hits, misses, evictions, hit_rate (hits / lookups, 0 before any lookup), size (open decoders), and the
        decoding requests (decoder_calls) and jumps in the frame sequence (seeks) of all decoders this process
        opened."""
        state = self._state.get()
        with state.lock:
            lookups = state.hits + state.misses
            decoders = [entry.decoder for entry in state.entries.values()]
            return {
                "hits": state.hits,
                "misses": state.misses,
                "evictions": state.evictions,
                "hit_rate": state.hits / lookups if lookups else 0.0,
                "size": len(state.entries),
                "decoder_calls": state.evicted_calls + sum(d.calls for d in decoders),
                "seeks": state.evicted_seeks + sum(d.seeks for d in decoders),
            }

    def clear(self) -> None:
        """Drop every open decoder and zero the statistics."""
        self._state = ProcessLocal(_State)
