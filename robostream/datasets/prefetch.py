"""Background prefetch of the video bytes of pieces a stream will start soon.

For a remote dataset, a few threads demux the upcoming pieces' time spans (so exactly their packets' byte ranges
are read, in blocks) into the storage's shared BlockCache, where the decoders find them; with the disk cache on, the
whole file is downloaded ahead instead. Prefetch only fills the free half of the block budget, which bounds the
bytes in flight and in memory and never evicts blocks in use. It is best effort: a failure is counted and the decoder's own read retries and reports.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import av

from robostream.format.metadata import DatasetMetadata
from robostream.storage.source import RangedReader


class Prefetcher:
    def __init__(self, meta: DatasetMetadata, threads: int = 2) -> None:
        self.meta = meta
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = -1
        self._requested: set[tuple[int, int, int]] = set()
        self.errors = 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None, "_pid": -1, "_requested": set()}

    @property
    def enabled(self) -> bool:
        return self.threads > 0 and not self.meta.data_storage.is_local and bool(self.meta.video_keys)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="robostream-prefetch")
            self._pid, self._requested = os.getpid(), set()
        return self._pool

    def piece(self, episode: int, first: int, stop: int) -> None:
        """Fetch frames [first, stop) of every camera of `episode` ahead of use (once per piece and process)."""
        if not self.enabled or (episode, first, stop) in self._requested:
            return
        pool = self._executor()
        self._requested.add((episode, first, stop))
        for key in self.meta.video_keys:
            pool.submit(self._fetch, episode, key, first, stop)

    def _fetch(self, episode: int, key: str, first: int, stop: int) -> None:
        storage = self.meta.data_storage
        if not storage.blocks.has_room_for_prefetch():
            return
        try:
            source = self.meta.open(self.meta.video_file(episode, key), what="video file")
            if not isinstance(source, RangedReader):  # disk cache: opening downloaded the whole file
                return
            source.prefetching = True
            span = self.meta.episodes.video_span(episode, key)
            start_s = span.from_timestamp + first / self.meta.fps
            end_s = span.from_timestamp + stop / self.meta.fps
            with av.open(source) as container:
                stream = container.streams.video[0]
                container.seek(max(0, int(start_s / stream.time_base)), stream=stream, backward=True)
                for packet in container.demux(stream):
                    if packet.pts is not None and float(packet.pts * stream.time_base) >= end_s:
                        break
                    if not storage.blocks.has_room_for_prefetch():
                        break
        except Exception:  # noqa: BLE001 - best effort; the decoder's read retries and reports for real
            self.errors += 1
