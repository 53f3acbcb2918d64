"""Decode the frames of several cameras of one episode, one thread per camera when the process has cores to spare.

torchcodec and PyAV release the GIL for most of the decoding, so cameras decode in parallel in one process. Decoders and
threads belong to the process that made them: after a fork (DataLoader workers) they are recreated, and they are
dropped when the reader is pickled (spawned workers).

A camera file is checked against the metadata when a decoder opens it (from its header: frame rate, frame size, and
that every episode's span in it ends inside the stream), so never per sample.

A depth camera's file is decoded as its one 12-bit gray plane (on the CPU, whatever the device asked for RGB) and
its codes turned into float32 depths in the dataset's depth unit right after decoding (format/depth.py): from there
on its frames are final values, which no step scales by 1/255 or augments.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from functools import partial
from typing import Any, Literal, overload

import numpy as np
import torch
from torch.utils.data import get_worker_info

from robostream.datasets.reading import Reading
from robostream.errors import RobostreamError, VideoDecodeError
from robostream.format.depth import depths_from_codes
from robostream.format.episodes import EpisodeTable
from robostream.format.info import FPS_RELATIVE_TOLERANCE, feature_frame_size, video_info
from robostream.format.metadata import DatasetMetadata
from robostream.storage.cache import described
from robostream.storage.store import RangedReader
from robostream.video.decoder import Plane, TorchCodecVideoDecoder, VideoDecoder, default_backend, open_video_decoder
from robostream.video.layout import frames_chw, gather_chw
from robostream.video.lookup import decode_unique
from robostream.video.options import GpuFallback
from robostream.video.packet_frames import PacketFrames

Times = Sequence[float] | np.ndarray  # episode-relative seconds
Request = tuple[int, Mapping[str, Times]]  # (episode, timestamps by camera)
FRAMES_PER_CALL = 16  # frames per grouped decoder call: ~3 MiB of 256x256 RGB output at a time (larger outputs
# fragment the heap of a worker: +30 MiB resident per worker measured at 64)
LOCATIONS_KEPT = 4096  # camera files whose full location a reader keeps worked out


class CameraReader:
    """Frames of an episode's cameras at episode-relative timestamps, as uint8 (T, C, H, W) tensors (depth cameras:
    float32 (T, 1, H, W) depths in `meta.depth_unit`)."""

    def __init__(self, meta: DatasetMetadata, reading: Reading, *, packets: bool = False) -> None:
        """
        Args:
            meta: the dataset's (or the mixture source's) metadata.
            reading: the dataset's reading: tolerance, backend and device; decoders, decode threads and frame pool.
            packets: decode the RGB cameras' frames by index from their own packets' bytes, fetched exactly
                (video/packet_frames.py: random frames of a remote file on the CPU with torchcodec; the caller
                fetches the packets ahead, VideoReadAhead.fetch_packets).
        """
        self.meta = meta
        self.tolerance_s = reading.settings.tolerance_s
        # Resolving the backend imports torchcodec (~2 s) here, once, so forked DataLoader workers inherit it.
        self.backend = reading.settings.video_backend or default_backend()
        self.device = reading.settings.decode_device
        self.gpu_fallback = reading.settings.decode_gpu_fallback
        # What each camera's files hold, as info.json says (lerobot records it): a GPU that cannot decode it is
        # known before any open (video/nvdec.py); None: the open finds out.
        self.codecs = {k: video_info(meta.info.features[k]).get("video.codec") for k in meta.video_keys}
        # The cameras whose frames by index come from their own packets (RGB, torchcodec on the CPU): decided here
        # once, for the decoders opened and for what the caller fetches.
        self.packets = frozenset(
            k
            for k in meta.video_keys
            if packets and k not in meta.depth_codings and self.backend == "torchcodec" and self.device == "cpu"
        )
        self._counters = reading.counters
        # Each use brings its opener (`_decoder`), which must not refer back to this reader: a reference cycle would
        # leave a dropped dataset's decoders to the cyclic garbage collector (see process_local.py for why).
        self.cache = reading.decoders
        self._executor = reading.decode_threads
        self._stages = reading.stage_times
        self.frame_pool = reading.frame_pool
        self.frame_sizes = {k: feature_frame_size(meta.info.features[k]) for k in meta.video_keys}
        self._locations: dict[str, str] = {}  # a camera file's full location, per relative path (the cache's key)
        self.decode_seconds = 0.0  # wall time this process spent in decode_many (the benchmark's fetch/decode split)

    def decode(self, episode_index: int, key: str, timestamps_s: Times) -> torch.Tensor:
        """One camera: frames at episode-relative times (the mp4 time is from_timestamp + t)."""
        span = self.meta.episodes.video_span(episode_index, key)
        relative = self.meta.video_file(episode_index, key)
        times = span.from_timestamp + np.asarray(timestamps_s, dtype=np.float64)
        shown = np.round(np.asarray(timestamps_s, dtype=np.float64), 6)[:8].tolist()
        context = f" (episode {episode_index}, camera {key!r}, episode times {shown})"
        try:
            with self._decoder(relative, key, episode_index) as decoder:
                check_frame_size(decoder, key, self.frame_sizes[key])
                frames, inverse = self._decode_unique(decoder, key, times, context)
                self._count_device(decoder, len(times))
                return gather_chw(frames, inverse)
        except RobostreamError as exc:
            if context in str(exc):
                raise
            raise type(exc)(f"{exc}{context}") from exc

    def _decoder(self, relative: str, key: str, episode_index: int) -> ContextManager[VideoDecoder]:
        """Borrow the decoder of one of this dataset's video files, camera `key`'s file holding `episode_index`
        (see VideoDecoderCache.use; the cache is the dataset's, shared by its sources: files are named by their full
        location)."""
        cache_key = self._cache_key(relative, key)
        device = cache_key[-1]  # a depth camera's: the CPU's
        opener = partial(
            open_camera_file,
            self.meta,
            relative,
            self.backend,
            device,
            key,
            episode_index,
            codec=self.codecs[key],
            gpu_fallback=self.gpu_fallback,
            packets=key in self.packets,
        )
        return self.cache.use(*cache_key, opener=opener)

    def _cache_key(self, relative: str, key: str) -> tuple[str, str, str]:
        """The decoder cache's key of camera `key`'s file `relative`: its full location, backend and device."""
        location = self._locations.get(relative)
        if location is None:  # worked out once per file: a path join per decoder call otherwise
            if len(self._locations) >= LOCATIONS_KEPT:
                self._locations.clear()  # bounded: a dataset of one file per episode has 100k+ files
            location = self._locations[relative] = self.meta.describe(relative)
        device = "cpu" if key in self.meta.depth_codings else self.device
        # A file's packet-fed decoder is not its plain one (another dataset of the process may read it plainly).
        return location, f"{self.backend}+packets" if key in self.packets else self.backend, device

    def close_files(self, episode_index: int) -> None:
        """Close the decoders of the camera files of `episode_index`, files that hold no other episode, once its
        piece has decoded every frame it needs: in a mixture of one-episode sources, decoders (~0.6 MiB each) no
        piece reads again would otherwise stay open within the cache's own size."""
        for key in self.meta.video_keys:
            location, backend, device = self._cache_key(self.meta.video_file(episode_index, key), key)
            if device == "cpu":  # a GPU decoder is freed where the cache drops it (video/decoder.py: GPU threads)
                self.cache.close(location, backend, device)

    def camera_decoders(self) -> dict[str, str]:
        """Where each camera is decoded, as its first episode's file opens in this process: "cpu", "cuda:N", or
        "cpu (GPU fallback: why)" for a camera asked on a GPU that cannot decode it."""
        described, episode = {}, int(self.meta.episodes.episode_index[0])
        for key in self.meta.video_keys:
            with self._decoder(self.meta.video_file(episode, key), key, episode) as decoder:
                described[key] = f"cpu (GPU fallback: {decoder.fallback})" if decoder.fallback else decoder.device
        return described

    def _count_device(self, decoder: VideoDecoder, frames: int) -> None:
        """Frames of a camera asked on a GPU: decoded there, or on the CPU where it cannot (frame_counts())."""
        if decoder.device == "cpu" and decoder.fallback is None:
            return  # the CPU was asked for
        info = get_worker_info()
        field = "frames_decoded_cpu_fallback" if decoder.fallback else "frames_decoded_gpu"
        self._counters.add(info.id if info is not None else 0, field, frames)

    def _decode_unique(
        self, decoder: VideoDecoder, key: str, times: np.ndarray, context: str = ""
    ) -> tuple[torch.Tensor, np.ndarray]:
        """`decode_unique` of camera `key`, a depth camera's codes turned into depths (each distinct frame once)."""
        frames, inverse = decode_unique(decoder, times, self.tolerance_s, context)
        coding = self.meta.depth_codings.get(key)
        if coding is not None:
            frames = torch.from_numpy(depths_from_codes(frames.numpy(), coding, self.meta.depth_unit))
        return frames, inverse

    def decode_many(self, episode_index: int, timestamps_by_key: Mapping[str, Times]) -> dict[str, torch.Tensor]:
        """Several cameras of one episode, as uint8 (T, C, H, W) each (in parallel threads when the process has
        cores to spare)."""
        return self.decode_episodes([(episode_index, timestamps_by_key)], pooled=False)[0]

    @overload
    def decode_episodes(
        self, requests: Sequence[Request], *, pooled: Literal[False]
    ) -> list[dict[str, torch.Tensor]]: ...

    @overload
    def decode_episodes(
        self, requests: Sequence[Request], *, pooled: Literal[True]
    ) -> list[dict[str, list[torch.Tensor]]]: ...

    def decode_episodes(
        self, requests: Sequence[Request], *, pooled: bool
    ) -> list[dict[str, torch.Tensor]] | list[dict[str, list[torch.Tensor]]]:
        """The frames `decode_many` gives for each (episode, timestamps by camera) request, with one decoder call
        per camera file for all requests together (a batch's pieces share files: fewer calls, each in file order).
        pooled: separate (C, H, W) frames from the frame pool (the streaming batch path gives them back); else one
        (T, C, H, W) tensor per request and camera, as `decode_many`."""
        started = time.perf_counter_ns()
        out: list[dict[str, Any]] = [{} for _ in requests]  # per request and camera: a tensor, or pooled frames
        by_camera: dict[str, list[int]] = {}
        for i, (_, times_by_key) in enumerate(requests):
            for key in times_by_key:
                by_camera.setdefault(key, []).append(i)
        pool = self._executor.get() if len(by_camera) > 1 else None
        jobs = [partial(self._decode_camera, key, requests, indices, out, pooled) for key, indices in by_camera.items()]
        if pool is None:
            for job in jobs:
                job()
        else:
            for future in [pool.submit(job) for job in jobs]:
                future.result()
        elapsed = time.perf_counter_ns() - started
        self.decode_seconds += elapsed / 1e9
        # The cameras' jobs run at once, each on a thread of the pool (as many as it has).
        threads = 1 if pool is None else min(len(jobs), pool._max_workers)
        self._stages.get().wait("decode", elapsed, threads=threads)
        return [{key: frames[key] for key in times_by_key} for frames, (_, times_by_key) in zip(out, requests)]

    def _decode_camera(
        self,
        key: str,
        requests: Sequence[Request],
        indices: Sequence[int],
        out: list[dict[str, Any]],
        pooled: bool,
    ) -> None:
        """One camera's frames of several requests: their times in each file concatenated into one call (of at
        most FRAMES_PER_CALL frames unless one request alone has more: the decoder's output is transient memory)."""
        by_file: dict[str, list[list[int]]] = {}
        for i in indices:
            calls = by_file.setdefault(self.meta.video_file(requests[i][0], key), [[]])
            if (
                calls[-1]
                and sum(len(requests[j][1][key]) for j in calls[-1]) + len(requests[i][1][key]) > FRAMES_PER_CALL
            ):
                calls.append([])
            calls[-1].append(i)
        stages = self._stages.get()
        for relative, group in ((r, g) for r, calls in by_file.items() for g in calls):
            started = time.perf_counter_ns()
            try:
                self._decode_group(key, relative, requests, group, out, pooled)
            finally:  # one decode task: one decoder call (a failed one and its per-episode retries included)
                stages.task("decode", time.perf_counter_ns() - started)

    def _decode_group(
        self,
        key: str,
        relative: str,
        requests: Sequence[Request],
        group: Sequence[int],
        out: list[dict[str, Any]],
        pooled: bool,
    ) -> None:
        """Camera `key`'s frames of the requests `group` from its file `relative`, in one decoder call (a lone
        pooled request of more than FRAMES_PER_CALL frames: in several, forward)."""
        times = [
            self.meta.episodes.video_span(requests[i][0], key).from_timestamp
            + np.asarray(requests[i][1][key], dtype=np.float64)
            for i in group
        ]
        joined = np.concatenate(times)
        try:
            with self._decoder(relative, key, requests[group[0]][0]) as decoder:
                check_frame_size(decoder, key, self.frame_sizes[key])
                if pooled and len(group) == 1 and len(joined) > FRAMES_PER_CALL:
                    # A piece's run longer than a call holds (a batch of one piece read in order, a piece's windows):
                    # calls of FRAMES_PER_CALL frames, each laid out before the next, so the decoder's output stays
                    # small (3 x 480x640: 59 MB per camera for 64 frames at once); its frames are in file order, so
                    # the calls continue without a seek.
                    laid: list[torch.Tensor] = []
                    for start in range(0, len(joined), FRAMES_PER_CALL):
                        frames, picks = self._decode_unique(decoder, key, joined[start : start + FRAMES_PER_CALL])
                        laid.extend(frames_chw(frames, picks, self.frame_pool.get()))
                    self._count_device(decoder, len(joined))
                    out[group[0]][key] = laid
                    return
                frames, inverse = self._decode_unique(decoder, key, joined)
                self._count_device(decoder, len(inverse))
        except RobostreamError:
            # Decode per episode again: the failing one raises the error that names the episode, camera and
            # times (and should all succeed alone, their frames are as checked as any).
            for i in group:
                out[i][key] = self.decode(requests[i][0], key, requests[i][1][key])
            return
        stops = list(itertools.accumulate(len(t) for t in times))
        # Each request gets its own CHW frames, laid out while hot in cache; no piece holds another's.
        for i, start, stop in zip(group, [0, *stops[:-1]], stops):
            picks = inverse[start:stop]
            out[i][key] = frames_chw(frames, picks, self.frame_pool.get()) if pooled else gather_chw(frames, picks)


def open_dataset_video(
    meta: DatasetMetadata,
    relative: str,
    backend: str | None,
    device: str,
    *,
    plane: Plane = "rgb",
    codec: str | None = None,
    gpu_fallback: GpuFallback = "cpu",
    packets: bool = False,
) -> VideoDecoder:
    """Open a video file of the dataset (local path, or ranged remote reads) as a decoder of `plane` (a depth
    camera's: "gray12"), checked against info.json's frame rate; on a GPU, `codec` and `gpu_fallback` as
    `open_video_decoder` takes them; `packets`: a remote file's frames by index decoded from their own packets
    (video/packet_frames.py) when torchcodec opened it and its packet index was read."""
    source = meta.open(relative, what="video file")
    name = described(meta.describe(relative), source)
    decoder: VideoDecoder = open_video_decoder(
        source, backend, device, name=name, plane=plane, codec=codec, gpu_fallback=gpu_fallback
    )
    check_frame_rate(decoder, meta.fps)
    if (
        packets
        and isinstance(source, RangedReader)
        and isinstance(decoder, TorchCodecVideoDecoder)
        and decoder.packet_index is not None
    ):
        reader = meta.open(relative, what="video file")
        assert isinstance(reader, RangedReader)  # the same root, without a disk cache
        decoder = PacketFrames(decoder, packets=reader, index=decoder.packet_index)
    return decoder


def open_camera_file(
    meta: DatasetMetadata,
    relative: str,
    backend: str | None,
    device: str,
    key: str,
    episode_index: int,
    *,
    codec: str | None = None,
    gpu_fallback: GpuFallback = "cpu",
    packets: bool = False,
) -> VideoDecoder:
    """Open camera `key`'s video file `relative`, the one holding `episode_index` (`open_dataset_video`), and check
    the spans of the episodes in it against its stream (`check_spans_in_stream`). A camera the GPU cannot decode
    warns once per process (the warning names the camera and why)."""
    plane: Plane = "gray12" if key in meta.depth_codings else "rgb"
    decoder = open_dataset_video(
        meta, relative, backend, device, plane=plane, codec=codec, gpu_fallback=gpu_fallback, packets=packets
    )
    if decoder.fallback:
        # Not the file in the text: Python shows a warning once per text, so once per camera and process.
        warnings.warn(f"camera {key!r} is decoded on the CPU: {decoder.fallback}", RuntimeWarning, stacklevel=2)
    check_spans_in_stream(decoder, meta.episodes, key, episode_index)
    return decoder


def check_spans_in_stream(decoder: VideoDecoder, episodes: EpisodeTable, key: str, episode_index: int) -> None:
    """Every episode's span of camera `key` in the file holding `episode_index` (the same chunk and file index, as
    `check_spans_apart` groups them) must end inside the stream, give or take half a frame. The last span of a file
    (or its only one) shifted later keeps its length and has no neighbour to overlap, so the metadata checks pass
    it, but each of its frames would read the next one, silently, until the last fails the tolerance check. From
    the header (end_s, num_frames); vectorised over the table, once per opened file: 0.1 ms at 100k episodes."""
    row = episodes.row_of(episode_index)
    chunk, file, to_ts = episodes.video_chunk[key], episodes.video_file[key], episodes.video_to_ts[key]
    end_s = max(decoder.end_s, decoder.num_frames / decoder.fps)  # the lenient one, should a header disagree
    past = (chunk == chunk[row]) & (file == file[row]) & (to_ts > end_s + 0.5 / decoder.fps)
    if not past.any():
        return
    late = int(np.flatnonzero(past)[0])
    raise VideoDecodeError(
        f"{decoder.path}: camera {key!r}: the video span of episode {int(episodes.episode_index[late])} ends at "
        f"{to_ts[late]:.6f} s but the video stream ends at {end_s:.6f} s ({decoder.num_frames} frames at "
        f"{decoder.fps:g} fps; {int(past.sum())} span(s) of this file end past it), so the episode would read "
        "frames that are not its own; the episode table and the videos disagree: re-convert or re-write the dataset"
    )


def check_frame_rate(decoder: VideoDecoder, fps: float) -> None:
    """A video file must have the dataset's frame rate: frames are looked up by time, so a 40 fps file in a 20 fps
    dataset would give frame 2k for frame k without failing any tolerance check. Free: read when the file opened."""
    if abs(decoder.fps - fps) > FPS_RELATIVE_TOLERANCE * fps:
        raise VideoDecodeError(
            f"{decoder.path}: the video stream runs at {decoder.fps:g} fps but meta/info.json "
            f"says the dataset's fps is {fps}; re-encode the video at {fps} fps or fix the dataset"
        )


def check_frame_size(decoder: VideoDecoder, key: str, size: tuple[int, int] | None) -> None:
    """A camera's video frames must have the (height, width) its info.json feature declares (None: not declared)."""
    if size is not None and size != (decoder.height, decoder.width):
        raise VideoDecodeError(
            f"{decoder.path}: the video's frames are {decoder.height}x{decoder.width} (height x "
            f"width) but meta/info.json declares {size[0]}x{size[1]} for camera {key!r}; "
            "re-encode the video or fix the feature's shape"
        )
