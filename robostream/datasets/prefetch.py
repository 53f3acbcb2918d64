"""Background prefetch of the video bytes of pieces a stream will start soon.

For a remote dataset, a few threads demux the upcoming pieces' time spans (so exactly their packets' byte ranges
are read, in blocks) into the storage's shared BlockCache, where the decoders find them; with the disk cache on, the
whole file is downloaded ahead instead. Prefetch only fills the free half of the block budget, which bounds the
bytes in flight and in memory and never evicts blocks in use.

A read that fails in prefetch (a missing file, the retry policy giving up, bytes FFmpeg cannot demux) is counted
(`frame_counts()["prefetch_errors"]`) and left to the decoder: its own read of the same bytes retries under the
same policy and raises the error for the sample that needs them. Any other exception is a bug: it is raised in
the consumer at its next prefetch request instead of vanishing with the thread.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import av

from robostream.datasets.counters import FrameCounters
from robostream.errors import RobostreamError
from robostream.format.metadata import DatasetMetadata
from robostream.process_local import ProcessLocal
from robostream.storage.store import RangedReader

EXPECTED = (RobostreamError, OSError, av.error.FFmpegError)  # failures the decoder's own read reports for real


@dataclass
class _State:
    pool: ThreadPoolExecutor
    requested: set[tuple[int, int, int]] = field(default_factory=set)
    failure: BaseException | None = None  # an unexpected exception of a prefetch thread


class Prefetcher:
    def __init__(self, meta: DatasetMetadata, counters: FrameCounters, threads: int = 2) -> None:
        self.meta = meta
        self.counters = counters
        self.threads = threads
        self._state = ProcessLocal(partial(_new_state, threads))

    @property
    def enabled(self) -> bool:
        return self.threads > 0 and not self.meta.data_storage.is_local and bool(self.meta.video_keys)

    def piece(self, episode: int, first: int, stop: int, worker: int) -> None:
        """Fetch frames [first, stop) of every camera of `episode` ahead of use (once per piece and process)."""
        if not self.enabled:
            return
        state = self._state.get()
        if state.failure is not None:
            raise RuntimeError("a video prefetch thread failed unexpectedly") from state.failure
        if (episode, first, stop) in state.requested:
            return
        state.requested.add((episode, first, stop))
        for key in self.meta.video_keys:
            future = state.pool.submit(self._fetch, episode, key, first, stop, worker)
            future.add_done_callback(partial(_keep_failure, state))

    def _fetch(self, episode: int, key: str, first: int, stop: int, worker: int) -> None:
        storage = self.meta.data_storage
        if not storage.has_room_for_prefetch():
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
                    if not storage.has_room_for_prefetch():
                        break
        except EXPECTED:
            self.counters.add(worker, "prefetch_errors", 1)


def _new_state(threads: int) -> _State:
    return _State(ThreadPoolExecutor(max(1, threads), thread_name_prefix="robostream-prefetch"))


def _keep_failure(state: _State, future: Future) -> None:
    if future.exception() is not None and state.failure is None:
        state.failure = future.exception()
