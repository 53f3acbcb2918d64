"""Video decoders behind one small interface: frames by index, with their presentation times.

Backends:
- "torchcodec" (default): FFmpeg via torchcodec, on the CPU or on the GPU's NVDEC engine (`device="cuda"`).
- "pyav": PyAV's bundled FFmpeg, CPU only; the fallback when torchcodec or system FFmpeg is unavailable.

A decoder owns an open file and is not thread-safe: use one from one thread at a time (VideoDecoderCache hands
each caller a lock with it). Never share a decoder across a fork: DataLoader workers open their own.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np
import torch

from robostream.errors import IncompatibleVersionsError, MissingFileError, VideoDecodeError
from robostream.video.versions import mismatch

BACKENDS = ("torchcodec", "pyav")


class VideoDecoder(Protocol):
    """What the datasets need from a decoder."""

    path: str
    fps: float
    num_frames: int
    end_s: float  # where the stream ends (its last frame's pts + duration), from the header: nothing is decoded
    height: int
    width: int
    calls: int  # decoding requests served
    seeks: int  # jumps in the frame sequence asked for (see count_jumps)

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        """Frames at the given (in-range) indices as uint8 (N, C, H, W) and their pts in seconds (N,)."""
        ...

    def get_frames_near_times(self, times_s: Sequence[float]) -> tuple[torch.Tensor, np.ndarray]:
        """The frames whose own pts lie nearest to each time, as get_frames_by_index returns them. Slower; for
        files whose frame times are off the k/fps grid (concatenated H.264 with B-frames drifts by a few ticks per
        episode), where index -> time by fps picks the wrong frame or runs past the end."""
        ...


@functools.cache
def torchcodec_available() -> bool:
    """True when torchcodec imports and finds FFmpeg libraries it can load (else robostream decodes with PyAV).

    Raises:
        IncompatibleVersionsError: torchcodec is installed for another torch release than this one (its loader's
            error is an undefined symbol; this says which versions go together instead).
    """
    try:
        import torchcodec.decoders  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:
        problem = _version_mismatch()
        if problem is not None:
            raise IncompatibleVersionsError(problem) from exc
        return False
    return True


def _version_mismatch() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("torchcodec")
    except PackageNotFoundError:
        return None
    return mismatch(torch.__version__, installed)


def count_jumps(previous: int | None, indices: Sequence[int]) -> int:
    """Jumps in a decoder's frame sequence: the first frame asked for unless it follows the last one decoded, and
    every gap inside a (sorted) request. Each makes the decoder seek, or decode frames nobody asked for."""
    first = 0 if previous is not None and indices[0] == previous + 1 else 1
    return first + sum(1 for a, b in zip(indices, indices[1:]) if b != a + 1)


def default_backend() -> str:
    return "torchcodec" if torchcodec_available() else "pyav"


class TorchCodecVideoDecoder:
    """torchcodec's VideoDecoder.

    seek_mode "approximate" (lerobot's choice, our default) maps frame index -> pts from the header's frame rate and
    opens a file without reading it through; right for the constant-frame-rate files LeRobot writes, and a wrong
    guess cannot pass silently because every frame's pts is checked against the requested time. "exact" scans every
    packet when the file is opened (the whole file, remotely).
    """

    def __init__(self, source: str | BinaryIO, device: str = "cpu", seek_mode: str = "approximate",
                 name: str | None = None) -> None:
        from torchcodec.decoders import VideoDecoder as _TorchCodecDecoder

        self.path = name or str(source)
        self._source = source  # keeps a file object (or a cache pin) alive as long as the decoder
        path = self.path
        try:
            self._decoder = _TorchCodecDecoder(source, device=device, seek_mode=seek_mode, dimension_order="NCHW")
        except (RuntimeError, ValueError) as exc:
            raise VideoDecodeError(f"{path}: torchcodec could not open the video on {device!r}: {exc}") from exc
        meta = self._decoder.metadata
        self.num_frames = int(meta.num_frames)
        self.fps = float(meta.average_fps)
        self.end_s = float(meta.end_stream_seconds or (meta.begin_stream_seconds or 0.0) + self.num_frames / self.fps)
        self.height, self.width = int(meta.height), int(meta.width)
        self.calls = self.seeks = 0
        self._last: int | None = None  # last frame index decoded

    def _count(self, indices: Sequence[int]) -> None:
        self.calls += 1
        self.seeks += count_jumps(self._last, indices)
        self._last = int(indices[-1])

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        self._count(indices)
        try:
            batch = self._decoder.get_frames_at(indices=list(indices))
        except (RuntimeError, IndexError, ValueError) as exc:
            raise VideoDecodeError(f"{self.path}: decoding frames {list(indices)[:8]}... failed: {exc}") from exc
        return batch.data, batch.pts_seconds.cpu().numpy().astype(np.float64)

    def get_frames_near_times(self, times_s: Sequence[float]) -> tuple[torch.Tensor, np.ndarray]:
        # The frame shown half a frame after t is the one whose pts is nearest to t (frames ~1/fps apart).
        meta = self._decoder.metadata
        begin = float(meta.begin_stream_seconds or 0.0)
        shown = np.asarray(times_s, dtype=np.float64) + 0.5 / self.fps
        shown = np.clip(shown, begin, np.nextafter(self.end_s, begin))
        self._count(np.floor((shown - begin) * self.fps).astype(np.int64).tolist())
        try:
            batch = self._decoder.get_frames_played_at(seconds=shown.tolist())
        except (RuntimeError, IndexError, ValueError) as exc:
            raise VideoDecodeError(f"{self.path}: decoding frames near {shown[:4].tolist()}... s failed: {exc}") from exc
        return batch.data, batch.pts_seconds.cpu().numpy().astype(np.float64)


class PyAVVideoDecoder:
    """PyAV decoding by forward scan from the nearest earlier keyframe; re-seeks only for backward or far jumps."""

    def __init__(self, source: str | BinaryIO, reseek_after_s: float = 1.0, name: str | None = None) -> None:
        import av

        self.path = name or str(source)
        self._source = source  # keeps a file object (or a cache pin) alive as long as the decoder
        path = self.path
        try:
            self._container = av.open(source)
            self._stream = self._container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as exc:
            raise VideoDecodeError(f"{path}: PyAV could not open a video stream: {exc}") from exc
        self._stream.thread_type = "AUTO"
        rate = self._stream.average_rate or self._stream.guessed_rate
        if not rate:
            raise VideoDecodeError(f"{path}: the video stream declares no frame rate")
        self.fps = float(rate)
        self.height, self.width = int(self._stream.codec_context.height), int(self._stream.codec_context.width)
        self._time_base = self._stream.time_base
        self._begin_s = float((self._stream.start_time or 0) * self._time_base)
        self.num_frames = int(self._stream.frames) or self._count_packets()
        duration = self._stream.duration  # in time_base units; None when the container does not say
        self.end_s = self._begin_s + (float(duration * self._time_base) if duration else self.num_frames / self.fps)
        self._reseek_after_s = reseek_after_s
        self._frames = None  # live decode generator, or None when a seek is needed
        self._pending = None  # the next decoded frame not yet consumed
        self._last_time = -np.inf  # time of the last frame taken from the generator
        self.calls = self.seeks = 0

    def _count_packets(self) -> int:
        count = sum(1 for p in self._container.demux(self._stream) if p.size)
        self._container.seek(0, stream=self._stream)
        return count

    def _next_frame(self):
        if self._pending is not None:
            frame, self._pending = self._pending, None
            return frame
        frame = next(self._frames, None)
        if frame is not None:
            self._last_time = float(frame.time)
        return frame

    def _decode_nearest(self, target_s: float):
        half = 0.5 / self.fps
        if self._frames is None or target_s < self._last_time - half or target_s - self._last_time > self._reseek_after_s:
            self.seeks += 1
            self._container.seek(max(0, int(round(target_s / self._time_base))), stream=self._stream, backward=True)
            self._frames = self._container.decode(self._stream)
            self._pending = None
            self._last_time = -np.inf
        previous = None
        while True:
            frame = self._next_frame()
            if frame is None:  # past the end: the last frame is the nearest
                self._frames = None
                return previous
            if float(frame.time) >= target_s - half:
                self._pending = frame  # it may also be the nearest frame of the next target
                return frame
            previous = frame

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        return self.get_frames_near_times([self._begin_s + int(i) / self.fps for i in indices])

    def get_frames_near_times(self, times_s: Sequence[float]) -> tuple[torch.Tensor, np.ndarray]:
        import av

        decoded: dict[float, tuple[np.ndarray, float]] = {}
        self.calls += 1
        try:
            for time_s in sorted(set(float(t) for t in times_s)):
                frame = self._decode_nearest(time_s)
                if frame is None:
                    raise VideoDecodeError(f"{self.path}: no frame decoded near {time_s:.6f} s")
                decoded[time_s] = (frame.to_ndarray(format="rgb24"), float(frame.time))
        except av.error.FFmpegError as exc:
            self._frames = None
            raise VideoDecodeError(f"{self.path}: PyAV failed decoding near {time_s:.6f} s: {exc}") from exc
        data = torch.from_numpy(np.stack([decoded[float(t)][0] for t in times_s])).permute(0, 3, 1, 2)
        pts = np.array([decoded[float(t)][1] for t in times_s], dtype=np.float64)
        return data, pts

    def close(self) -> None:
        self._container.close()


def open_video_decoder(source: str | Path | BinaryIO, backend: str | None = None, device: str = "cpu",
                       name: str | None = None) -> VideoDecoder:
    """Open a video (a path, or a seekable binary file object such as a ranged remote reader) with the named
    backend (default: torchcodec when available) on `device` ("cpu" or "cuda"); `name` is used in errors."""
    if isinstance(source, (str, Path)):
        # A str stays the very object passed: a disk-cache path (storage.cache.CachedPath, a str) holds the file's
        # pin, which the decoder keeps as long as it lives; str() of it would be a plain copy without the pin.
        source = source if isinstance(source, str) else str(source)
        if not Path(source).is_file():
            raise MissingFileError(f"{source}: video file not found")
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"video_backend={backend!r}: expected one of {BACKENDS}")
    if device != "cpu":
        if backend != "torchcodec":
            raise ValueError(f"video_decode_device={device!r} needs video_backend='torchcodec' (PyAV decodes on CPU)")
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(
                f"video_decode_device={device!r}: this torch build has no CUDA device available "
                f"(torch {torch.__version__}); use 'cpu' or install CUDA builds of torch and torchcodec")
    if backend == "torchcodec":
        if not torchcodec_available():
            raise VideoDecodeError("torchcodec is not importable (missing FFmpeg libraries?); use video_backend='pyav'")
        return TorchCodecVideoDecoder(source, device=device, name=name)
    return PyAVVideoDecoder(source, name=name)
