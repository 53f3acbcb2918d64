"""The video bytes of frames a reader will decode, located in their files and fetched ahead (remote datasets).

Each camera file's packet index is read once per process (video/packet_index.py: the moov only, which the
decoder reads anyway); frames at episode times then map to byte spans of the file, which the storage's read-ahead
fetches merged and many at once (storage/read_ahead.py). The streaming dataset asks for the spans of its next picks
in the order they will be decoded, the map-style dataset for a whole batch before decoding it.

Local datasets, and remote ones read through the disk cache (whole files), fetch nothing here.

A file whose index cannot be read (missing, unreachable, not an mp4 with a sample table) is counted
(`read_ahead_errors`) and left to the decoder: its own read of the same bytes reports the error for the sample that
needs them, under the same retry policy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from robostream.datasets.reading import INDEX_THREADS, Reading
from robostream.errors import RobostreamError
from robostream.format.metadata import DatasetMetadata
from robostream.process_local import ProcessLocal
from robostream.storage.read_ahead import Need, ReadAhead
from robostream.storage.store import RangedReader
from robostream.video.packet_index import (
    AVIO_BYTES,
    PacketIndex,
    load_packet_index,
    moov_span,
    read_packet_index,
    save_packet_index,
)

HEAD_BYTES = 512 << 10  # the first bytes of a video file asked for with its first block (its moov, usually)
CAMERAS_KEPT = 1 << 16  # (episode, camera) locations kept per process
EXPECTED = (RobostreamError, OSError)  # failures the decoder's own read reports for real


class _File:
    def __init__(self, reader: RangedReader | None, index: PacketIndex | None) -> None:
        self.reader, self.index = reader, index

    def packets_served(self) -> tuple[RangedReader, PacketIndex] | None:
        """The reader and index of a file whose frames a packet decoder finds by their place (evenly shown), else
        None."""
        if self.reader is None or self.index is None or not self.index.evenly_shown:
            return None
        return self.reader, self.index


class _State:
    """One process's files (reader and packet index)."""

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.cameras: dict[tuple[int, str], tuple[str, float]] = {}  # (episode, camera) -> (file, its start time)


class VideoReadAhead:
    """Byte spans of camera frames, fetched ahead of the decoders of one dataset (per process)."""

    def __init__(self, meta: DatasetMetadata, *, enabled: bool, reading: Reading) -> None:
        """
        Args:
            meta: the dataset's (or the mixture source's) metadata.
            enabled: False turns fetching ahead off (then decoders fetch their blocks as they read them).
            reading: the dataset's reading: the threads reading packet indexes, the tally of files whose index
                could not be read.
        """
        self.meta = meta
        self._threads = reading.index_threads
        self._stages = reading.stage_times
        self._failures = reading.read_ahead_failures
        storage = meta.data_storage
        self.enabled = enabled and not storage.is_local and storage.cache is None and bool(meta.video_keys)
        self._state = ProcessLocal(_State)

    @property
    def read_ahead(self) -> ReadAhead:
        """The storage's read-ahead these spans are handed to (shared by the storages that share their blocks)."""
        return self.meta.data_storage.read_ahead

    def fetch_packets(
        self, requests: Sequence[tuple[int, Mapping[str, np.ndarray]]], *, need: Need
    ) -> list[tuple[RangedReader, int, int]]:
        """Fetch, per camera, exactly the packets that decoding the frames of these requests needs, each frame's on
        its own (video/packet_frames.py decodes them; storage/exact_ranges.py holds them): located with one
        packet-index lookup and asked for with one fetch per file for all the requests, so a batch's requests go
        out together and frames decoded from one keyframe share one. A camera whose file a packet decoder does not
        serve (frames not evenly shown, or shown before their keyframe) gets the spans its torchcodec decoder reads
        instead: those are returned, as `fetch` returns them.

        Args:
            requests: (episode, episode times in seconds by camera) of each sample, a map-style batch's.
            need: how soon the spans of the cameras not served by packets are needed (storage/read_ahead.py).
        """
        plain: list[tuple[int, dict[str, np.ndarray]]] = []
        by_file: dict[str, tuple[RangedReader, PacketIndex, list[np.ndarray]]] = {}  # by file version
        for episode, times_by_key in requests:
            rest = {}
            for key, times in times_by_key.items():
                camera = self._camera(episode, key) if len(times) else None
                if camera is None or (served := camera[0].packets_served()) is None:
                    rest[key] = times
                    continue
                reader, index = served
                from_s = camera[1]
                by_file.setdefault(reader.key, (reader, index, []))[2].append(from_s + times)
            if rest:
                plain.append((episode, rest))
        for reader, index, file_times in by_file.values():
            file_s = np.concatenate(file_times)
            starts, ends = index.packet_bytes(file_s, file_s)
            reader.fetch_exact(zip(starts.tolist(), ends.tolist()))
        return [span for episode, rest in plain for span in self.fetch(episode, rest, need=need)]

    def fetch(
        self, episode: int, times_by_key: Mapping[str, np.ndarray], *, need: Need
    ) -> list[tuple[RangedReader, int, int]]:
        """Fetch, per camera, the bytes that decoding the frames at these episode times reads (`need`: see
        storage/read_ahead.py); returns the spans asked for (to release those fetched ahead that no decoder read, see RangedReader.release)."""
        asked = []
        for key, times in times_by_key.items():
            spans = (
                self.spans(episode, key, np.min(times, keepdims=True), np.max(times, keepdims=True))
                if len(times)
                else None
            )
            if spans is not None:
                reader, (start,), (end,) = spans
                reader.fetch_ahead(int(start), int(end), need=need)
                asked.append((reader, int(start), int(end)))
        return asked

    def spans(
        self, episode: int, key: str, first_s: np.ndarray, last_s: np.ndarray
    ) -> tuple[RangedReader, np.ndarray, np.ndarray] | None:
        """The reader of camera `key`'s file of `episode` and, for each i, the bytes [start, end) that decoding
        its frames from episode time `first_s[i]` to `last_s[i]` reads through a file object; None when fetching
        ahead is off or nothing is known of the file."""
        camera = self._camera(episode, key)
        if camera is None:
            return None
        file, from_s = camera
        if file.index is None or file.reader is None:
            return None
        starts, ends = file.index.byte_spans(from_s + first_s, from_s + last_s)
        return file.reader, starts, ends

    def _camera(self, episode: int, key: str) -> tuple[_File, float] | None:
        """The file of camera `key` of `episode` (its reader and packet index, read here when new) and the episode's
        start time in it; None when fetching ahead is off."""
        if not self.enabled:
            return None
        state = self._state.get()
        camera = state.cameras.get((episode, key))
        if camera is None:  # where the episode's camera lies: asked per sample on the map-style path
            if len(state.cameras) >= CAMERAS_KEPT:  # memory flat in the dataset's size
                state.cameras.clear()
            camera = state.cameras[(episode, key)] = (
                self.meta.video_file(episode, key),
                self.meta.episodes.video_span(episode, key).from_timestamp,
            )
        relative, from_s = camera
        file = state.files.get(relative)
        if file is None:  # its index read here, in the loop (prepare reads several at once)
            started = time.perf_counter_ns()
            file = self._file(relative)
            self._stages.get().wait("index", time.perf_counter_ns() - started, threads=1)
        return file, from_s

    def prepare(self, cameras: Sequence[tuple[int, str]]) -> None:
        """Read the packet indexes of the files of these (episode, camera) pairs not read yet, concurrently."""
        if not self.enabled:
            return
        state = self._state.get()
        new = sorted({self.meta.video_file(episode, key) for episode, key in cameras} - state.files.keys())
        if len(new) > 1:
            started = time.perf_counter_ns()
            list(self._threads.get().map(self._file, new))
            threads = min(len(new), INDEX_THREADS)
            self._stages.get().wait("index", time.perf_counter_ns() - started, threads=threads)

    def _index(self, reader: RangedReader) -> PacketIndex | None:
        """The file's packet index: built once per node (a file version's index never changes) and kept in the
        node's derived folder, so every other process (workers, ranks, later epochs and runs) loads it in a
        millisecond instead of parsing tens of thousands of entries. A file nothing but its size names (no ETag,
        no Last-Modified) has its index read anew in each process: a kept one could outlive a same-size change."""

        def build(folder: Path) -> None:
            save_packet_index(read_packet_index(reader), folder)

        if self.meta.derived is None or not reader.version.token:
            return read_packet_index(reader)
        return self.meta.derived.open(f"{reader.key}|packet-index-v5", build, load_packet_index)

    def _file(self, relative: str) -> _File:
        state = self._state.get()
        file = state.files.get(relative)
        if file is None:
            started = time.perf_counter_ns()
            try:
                # The head of the file in the request that finds the moov (and the file's version, where this
                # process has not asked for it yet): a faststart moov (at the start) of up to ~70k packets then costs
                # no round trip of its own.
                reader = self.meta.open(relative, what="video file", first_bytes=HEAD_BYTES)
                assert isinstance(reader, RangedReader)  # enabled: a remote root without the disk cache
                moov = moov_span(reader)
                if moov is not None:  # in one request: FFmpeg would read it a chunk (a round trip) at a time
                    # and a decoder's open reads one chunk past it (the mdat's header and first packets)
                    reader.fetch_ahead(moov[0], moov[1] + AVIO_BYTES, need="now")
                file = _File(reader, self._index(reader))
            except EXPECTED:
                file = _File(None, None)
                self._failures.get().add()  # its frames are not fetched ahead (read_ahead_errors)
            state.files[relative] = file
            self._stages.get().task("index", time.perf_counter_ns() - started)  # any thread: the pool's or the loop
        return file
