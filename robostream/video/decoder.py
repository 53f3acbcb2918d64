"""Video decoders behind one small interface: frames by index, with their presentation times.

Backends:
- "torchcodec" (default): FFmpeg via torchcodec, on the CPU or on the GPU's NVDEC engine (`device="cuda"`).
- "pyav": PyAV's bundled FFmpeg, CPU only; the fallback when torchcodec or system FFmpeg is unavailable.

Planes: "rgb" (uint8 RGB frames, (N, 3, H, W)) for cameras; "gray12" (int16 (N, 1, H, W) holding the 12-bit codes
0..4095 exactly) for depth maps, which lerobot writes as lossless HEVC gray12le: always PyAV on the CPU, because
torchcodec's public API only converts such a stream to 8-bit RGB (lossy: 256 levels for 4096 codes).

A decoder owns an open file and is not thread-safe: use one from one thread at a time (VideoDecoderCache hands
each caller a lock with it). Never share a decoder across a fork: DataLoader workers open their own.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, Protocol, TypedDict, get_args

import numpy as np
import torch

# torchcodec's import brings in torch._dynamo, which imports torch.distributed.nn, whose functions take
# `group=group.WORLD` as a default argument. Imported after init_process_group, those defaults hold the process
# group, so destroy_process_group cannot free it: its gloo threads were still running when the interpreter
# exited and, about once in 40 two-rank bench runs, aborted the rank there ("terminate called without an active
# exception"). Imported here, with this module (`from robostream import ...`, the bench's ranks), before a script
# makes its group, the defaults are None, as torch means them to be; a script that makes its group first still
# binds them when it imports torch._dynamo (torch.compile, torchcodec).
if torch.distributed.is_available():
    import torch.distributed.nn  # noqa: F401

from robostream.collector import collector_paused
from robostream.errors import IncompatibleVersionsError, MissingFileError, VideoDecodeError
from robostream.process_local import ProcessLocal
from robostream.video.nvdec import REFUSALS, gpu_of
from robostream.video.options import GpuFallback
from robostream.video.packet_index import PacketIndex, read_packet_index
from robostream.video.versions import mismatch

if TYPE_CHECKING:
    from av import VideoFrame

# On an H100, GPU decoders opened by one thread and then called from the camera threads crashed the process
# (segfault in torchcodec's get_frames_at; decoders opened by the camera threads themselves never did): a thread
# that never ran CUDA work has no CUDA context current, which NVDEC's calls need. So every thread makes the device's
# context current once before its first call into a GPU decoder (`_gpu_thread_ready`), and calls into one process's
# GPU decoders, opening included, hold one lock (the crash also had two threads decoding at once; the engine is
# shared by the process's decoders anyway). BENCHMARKS.md "GPU decoding per camera".
_GPU_CALLS = ProcessLocal(threading.Lock)
_GPU_THREADS = threading.local()  # per thread: the devices whose context this thread has made current


def _gpu_thread_ready(device: str) -> None:
    """Make `device`'s CUDA context current in this thread, once: a kernel launch does (torchcodec makes a CUDA
    tensor with torch.zeros for the same reason when it opens a decoder)."""
    ready = getattr(_GPU_THREADS, "devices", None)
    if ready is None:
        ready = _GPU_THREADS.devices = set()
    if device not in ready:
        torch.zeros(1, device=device)
        ready.add(device)


@contextlib.contextmanager
def _gpu_call(device: str) -> Iterator[None]:
    """Around every call into a GPU decoder: this thread's context current, the process's GPU calls one at a time."""
    _gpu_thread_ready(device)
    with _GPU_CALLS.get():
        yield


BACKENDS = ("torchcodec", "pyav")
Plane = Literal["rgb", "gray12"]
PLANES: tuple[str, ...] = get_args(Plane)
GRAY12_FORMATS = ("gray12le", "gray12be")  # one 12-bit gray plane (FFmpeg's decoders give the native-endian one)


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
    device: str  # where it decodes: "cpu" or "cuda:N" (its frames come out there)
    fallback: str | None  # why it decodes on the CPU though a GPU was asked for (None: it was not, or it does not)

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        """Frames at the given (in-range) indices as (N, C, H, W) and their pts in seconds (N,): uint8 RGB (C=3)
        for plane "rgb", int16 codes 0..4095 (C=1) for plane "gray12"."""
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
    # The import makes ~300k objects (torch._dynamo, sympy): with the cyclic collector on, it runs full passes over
    # the whole process meanwhile (~0.35 s of the import's ~1.2 s here, once per process).
    try:
        with collector_paused():
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


def nvdec_backend() -> contextlib.AbstractContextManager[object]:
    """Where a torchcodec VideoDecoder opened on "cuda" gets torchcodec's own NVDEC decoder: set_cuda_backend("beta")
    in torchcodec 0.9-0.12, whose default is FFmpeg's CUDA path (on an H100, 640x480 H.264: 17.5 random frames/s
    against 1,063, and 496 on one CPU thread; it also crashed the process on AV1, which Hopper cannot decode, where
    "beta" falls back to the CPU and says so: BENCHMARKS.md "GPU machine"); 0.13 made it the default ("nvdec") and
    still takes "beta". A torchcodec without set_cuda_backend has FFmpeg's path only."""
    try:
        from torchcodec.decoders import set_cuda_backend
    except ImportError:
        return contextlib.nullcontext()
    return set_cuda_backend("beta")


class TorchCodecVideoDecoder:
    """torchcodec's VideoDecoder, finding frames by their presentation time where a file needs it.

    Most files open in seek_mode "approximate" (lerobot's choice): frame index -> pts from the header's frame rate,
    then FFmpeg's seek to that pts; nothing is read beyond the header, and a wrong guess cannot pass silently because
    every frame's pts is checked against the requested time. But FFmpeg's mp4 seek picks the keyframe by decode time:
    in an open GOP (HEVC as lerobot writes it, depth and RGB: CRA keyframes whose leading frames are decoded after
    them) it lands one keyframe late and the leading frame asked for is dropped, every time. For such files (found
    from the mp4's tables, read from the moov FFmpeg reads anyway: video/packet_index.py) torchcodec gets the frames'
    presentation times and keyframes as custom frame mappings, and seeks to the keyframe shown at or before each
    frame: 35 ms to open a file of 18k frames, against 2 ms approximate; seek_mode "exact" would instead read the
    whole file at open (a download, remotely). A file whose edit list trims its start (FFmpeg's muxer never writes
    one) lists frames FFmpeg does not show: the pts check refuses the frames that would come out wrong.
    """

    def __init__(
        self, source: str | BinaryIO, device: str = "cpu", name: str | None = None, *, fallback: str | None = None
    ) -> None:
        from torchcodec.decoders import VideoDecoder as _TorchCodecDecoder

        self.path = name or str(source)
        self.device = "cpu" if device == "cpu" else str(torch.device(device))
        self.fallback = fallback
        self._source = source  # keeps a file object (or a cache pin) alive as long as the decoder
        path = self.path
        self.packet_index = _packet_index(source)  # from the moov (remote: the bytes FFmpeg reads anyway)
        options = _seek_options(self.packet_index)
        self.seek_mode: str = options.get("seek_mode", "custom_frame_mappings")  # how frames are found (diagnostics)
        self._calls = functools.partial(_gpu_call, self.device) if self.device != "cpu" else contextlib.nullcontext
        try:
            # torchcodec reads any file object with read and seek (its docs), though its annotation names two classes
            with self._calls(), nvdec_backend() if self.device != "cpu" else contextlib.nullcontext():
                self._decoder = _TorchCodecDecoder(
                    source,  # type: ignore[arg-type]
                    device=device,
                    dimension_order="NCHW",
                    **options,
                )
        except (RuntimeError, ValueError) as exc:
            raise VideoDecodeError(f"{path}: torchcodec could not open the video on {device!r}: {exc}") from exc
        meta = self._decoder.metadata
        if meta.num_frames is None or not meta.average_fps or meta.height is None or meta.width is None:
            raise VideoDecodeError(
                f"{path}: torchcodec found no frame count, frame rate or frame size for the video stream "
                f"(frames {meta.num_frames}, fps {meta.average_fps}, {meta.width}x{meta.height}); re-encode the video"
            )
        self.num_frames = int(meta.num_frames)
        self.fps = float(meta.average_fps)
        self.begin_s = float(meta.begin_stream_seconds or 0.0)  # the first frame's pts
        self.end_s = float(meta.end_stream_seconds or self.begin_s + self.num_frames / self.fps)
        self.height, self.width = int(meta.height), int(meta.width)
        self.codec: str | None = meta.codec
        self.calls = self.seeks = 0
        self._last: int | None = None  # last frame index decoded

    def gpu_refusal(self) -> str | None:
        """On a GPU: why torchcodec's NVDEC decoder decodes this file on the CPU instead (its `cpu_fallback`, known
        at open), else None."""
        # torchcodec < 0.9 has no cpu_fallback (nor its NVDEC decoder): nothing to probe, the table decided.
        with self._calls():
            status = getattr(self._decoder, "cpu_fallback", None)
        return str(status) if self.device != "cpu" and status else None

    def _count(self, indices: Sequence[int]) -> None:
        self.calls += 1
        self.seeks += count_jumps(self._last, indices)
        self._last = int(indices[-1])

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        self._count(indices)
        try:
            with self._calls():
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
            with self._calls():
                batch = self._decoder.get_frames_played_at(seconds=shown.tolist())
        except (RuntimeError, IndexError, ValueError) as exc:
            raise VideoDecodeError(
                f"{self.path}: decoding frames near {shown[:4].tolist()}... s failed: {exc}"
            ) from exc
        return batch.data, batch.pts_seconds.cpu().numpy().astype(np.float64)


class _SeekOptions(TypedDict, total=False):
    seek_mode: Literal["approximate"]
    custom_frame_mappings: str


def _seek_options(index: PacketIndex | None) -> _SeekOptions:
    """torchcodec's seek options for a file (its packet index): approximate, unless its keyframes have leading
    frames (see TorchCodecVideoDecoder)."""
    if index is None or not index.has_leading_frames:
        return {"seek_mode": "approximate"}
    return {"custom_frame_mappings": frame_mappings(index)}


def _packet_index(source: str | BinaryIO) -> PacketIndex | None:
    if isinstance(source, str):
        with open(source, "rb") as file:
            return read_packet_index(file)
    return read_packet_index(source)  # leaves the reader where it was, for FFmpeg


def _keyframe_times(index: PacketIndex | None) -> tuple[np.ndarray, np.ndarray]:
    """Each keyframe's presentation time and the time a seek lands on it by, in seconds, by presentation time
    (empty without an index). The seek time is its decode time as FFmpeg's mp4 index keeps it: the sample table's
    own, from 0, where the packets come out shifted by the first one's (a B-frame stream's starts below zero)."""
    if index is None:
        return np.empty(0), np.empty(0)
    shown, positions = index.keyframes_shown
    return shown, (index.dts[positions] - index.dts.min()) / index.timescale


def frame_mappings(index: PacketIndex) -> str:
    """torchcodec's custom frame mappings of an indexed file: ffprobe's -show_frames JSON (pts, duration and
    key_frame of each frame, in the stream's time base), in presentation order."""
    key = np.zeros(len(index.pts), dtype=np.int64)
    key[index.keyframes] = 1
    order = np.argsort(index.pts, kind="stable")
    # Formatted, not json.dumps of dicts: 2.5x faster (11 ms for 18k frames), and the rows are plain integers.
    rows = map(
        '{{"pts":{},"duration":{},"key_frame":{}}}'.format,
        index.pts[order].tolist(),
        index.duration[order].tolist(),
        key[order].tolist(),
    )
    return '{"frames":[' + ",".join(rows) + "]}"


class PyAVVideoDecoder:
    """PyAV decoding by forward scan from the nearest earlier keyframe; re-seeks only for backward or far jumps.

    plane "rgb" gives uint8 RGB frames; "gray12" the int16 codes of a one-plane 12-bit gray stream (depth maps)."""

    def __init__(
        self, source: str | BinaryIO, reseek_after_s: float = 1.0, name: str | None = None, *, plane: Plane = "rgb"
    ) -> None:
        import av

        self.path = name or str(source)
        self._source = source  # keeps a file object (or a cache pin) alive as long as the decoder
        path = self.path
        try:
            self._container = av.open(source, "r")
            self._stream = self._container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as exc:
            raise VideoDecodeError(f"{path}: PyAV could not open a video stream: {exc}") from exc
        if plane == "gray12" and self._stream.codec_context.pix_fmt not in GRAY12_FORMATS:
            self._container.close()
            raise VideoDecodeError(
                f"{path}: the feature is marked as a depth map (is_depth_map) but the video is not a gray12 stream: "
                f"its pixel format is {self._stream.codec_context.pix_fmt!r}, not one of {GRAY12_FORMATS}. Re-encode "
                f"it with lerobot's depth encoder (HEVC gray12le, lossless) or drop the feature's is_depth_map marker."
            )
        self._stack = _stack_gray12 if plane == "gray12" else _stack_rgb
        # Depth maps are read at random frames, from every other keyframe: frame threads would decode frames ahead
        # that each seek throws away (random frames 1.8x slower at 256x256, sequential decoding no faster). Slice
        # threads only, like torchcodec's one thread per decoder.
        self._stream.thread_type = "SLICE" if plane == "gray12" else "AUTO"
        rate = self._stream.average_rate or self._stream.guessed_rate
        if not rate:
            raise VideoDecodeError(f"{path}: the video stream declares no frame rate")
        self.fps = float(rate)
        self.height, self.width = int(self._stream.codec_context.height), int(self._stream.codec_context.width)
        if self._stream.time_base is None:
            raise VideoDecodeError(f"{path}: the video stream declares no time base")
        self._time_base = self._stream.time_base
        self._begin_s = float((self._stream.start_time or 0) * self._time_base)
        self.num_frames = int(self._stream.frames) or self._count_packets()
        duration = self._stream.duration  # in time_base units; None when the container does not say
        self.end_s = self._begin_s + (float(duration * self._time_base) if duration else self.num_frames / self.fps)
        self._reseek_after_s = reseek_after_s
        self._keyframe_times = _keyframe_times(_packet_index(source))
        self._frames: Iterator[VideoFrame] | None = None  # live decode generator, or None when a seek is needed
        self._pending: VideoFrame | None = None  # the next decoded frame not yet consumed
        self._last_time = -np.inf  # time of the last frame taken from the generator
        self.calls = self.seeks = 0
        self.device: str = "cpu"
        self.fallback: str | None = None

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

    def _seek_to_or_before(self, target_s: float) -> None:
        """Start decoding so that the first frame out is shown at or before `target_s` (or is the stream's first).

        FFmpeg's mp4 seek picks the keyframe by decode time: in an open GOP (HEVC CRA keyframes) the frames shown
        just before a keyframe are decoded after it and dropped after a seek, so a seek to their time starts at the
        next keyframe (with lerobot's HEVC, where a keyframe's decode time is three frames before its own: up to two
        keyframes late). With the mp4's index, the seek goes to the decode time of the last keyframe shown at or
        before the target, which lands on it: one seek, no frame decoded in vain (random depth frames 2.5x faster).
        Without one, or should that not land early enough, seek again earlier, one frame back and doubling, until
        the first frame is early enough.
        """
        half, back = 0.5 / self.fps, 0.0
        shown, seek_s = self._keyframe_times
        keyframe = int(np.searchsorted(shown, target_s + half, side="right")) - 1
        at_s = float(seek_s[keyframe]) if keyframe >= 0 else target_s
        floor_s = 0.0
        while True:
            at_s = max(at_s, floor_s)
            self._container.seek(int(round(at_s / self._time_base)), stream=self._stream, backward=True)
            self._frames = self._container.decode(self._stream)
            self._pending, self._last_time = None, -np.inf
            first = self._next_frame()
            if (first is not None and float(first.time) <= target_s + half) or at_s <= floor_s:
                self._pending = first
                return
            back = max(1.0 / self.fps, 2 * back)
            at_s = min(at_s, target_s) - back

    def _decode_nearest(self, target_s: float):
        half = 0.5 / self.fps
        if (
            self._frames is None
            or target_s < self._last_time - half
            or target_s - self._last_time > self._reseek_after_s
        ):
            self.seeks += 1  # one jump, however many seeks it takes to land before it
            self._seek_to_or_before(target_s)
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

        decoded: dict[float, tuple[object, float]] = {}
        self.calls += 1
        try:
            for time_s in sorted(set(float(t) for t in times_s)):
                frame = self._decode_nearest(time_s)
                if frame is None:
                    raise VideoDecodeError(f"{self.path}: no frame decoded near {time_s:.6f} s")
                decoded[time_s] = (frame, float(frame.time))
            data = self._stack([decoded[float(t)][0] for t in times_s])
        except av.error.FFmpegError as exc:
            self._frames = None
            raise VideoDecodeError(f"{self.path}: PyAV failed decoding near {time_s:.6f} s: {exc}") from exc
        pts = np.array([decoded[float(t)][1] for t in times_s], dtype=np.float64)
        return data, pts

    def close(self) -> None:
        self._container.close()


def _stack_rgb(frames: list) -> torch.Tensor:
    """uint8 (N, 3, H, W) RGB, a channels-last view."""
    return torch.from_numpy(np.stack([frame.to_ndarray(format="rgb24") for frame in frames])).permute(0, 3, 1, 2)


def _stack_gray12(frames: list) -> torch.Tensor:
    """int16 (N, 1, H, W): the 12-bit codes as written (torch has no uint16 arithmetic worth the name; 0..4095 fits)."""
    codes = np.stack([frame.to_ndarray(format="gray12le") for frame in frames])
    return torch.from_numpy(codes.view(np.int16)).unsqueeze(1)


def open_video_decoder(
    source: str | Path | BinaryIO,
    backend: str | None = None,
    device: str = "cpu",
    name: str | None = None,
    *,
    plane: Plane = "rgb",
    codec: str | None = None,
    gpu_fallback: GpuFallback = "cpu",
) -> VideoDecoder:
    """Open a video (a path, or a seekable binary file object such as a ranged remote reader) with the named
    backend (default: torchcodec when available) on `device` ("cpu" or "cuda"); `name` is used in errors.

    On a GPU, a file whose codec the GPU's NVDEC does not decode (`codec`, what the file is said to hold, checked
    against video/nvdec.py's table before opening; else torchcodec's own verdict at open) is decoded on the CPU,
    the decoder's `fallback` saying why, or refused when `gpu_fallback` is "error".

    plane: "rgb" gives uint8 RGB frames (N, 3, H, W); "gray12" gives a depth map's 12-bit codes as int16
    (N, 1, H, W), exactly as written. A gray12 stream is decoded by PyAV on the CPU whatever backend and device are
    asked (torchcodec's public API only gives it as 8-bit RGB): its frames are CPU tensors, which the caller moves.
    Raises VideoDecodeError when a gray12 plane is asked of a video that is not one 12-bit gray plane."""
    if isinstance(source, (str, Path)):
        # A str stays the very object passed: a disk-cache path (storage.cache.CachedPath, a str) holds the file's
        # pin, which the decoder keeps as long as it lives; str() of it would be a plain copy without the pin.
        source = source if isinstance(source, str) else str(source)
        if not Path(source).is_file():
            raise MissingFileError(f"{source}: video file not found")
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"video_backend={backend!r}: expected one of {BACKENDS}")
    if plane not in PLANES:
        raise ValueError(f"plane={plane!r}: expected one of {PLANES}")
    if plane == "gray12":
        return PyAVVideoDecoder(source, name=name, plane="gray12")
    if device != "cpu":
        if backend != "torchcodec":
            raise ValueError(
                f"decoding=DecodeOptions(device={device!r}) needs video_backend='torchcodec' (PyAV decodes on CPU)"
            )
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(
                f"decoding=DecodeOptions(device={device!r}): this torch build has no CUDA device available "
                f"(torch {torch.__version__}); use 'cpu' or install CUDA builds of torch and torchcodec"
            )
    if backend == "torchcodec":
        if not torchcodec_available():
            raise VideoDecodeError("torchcodec is not importable (missing FFmpeg libraries?); use video_backend='pyav'")
        if device != "cpu":
            return _open_on_gpu(source, device, name or str(source), codec, gpu_fallback)
        return TorchCodecVideoDecoder(source, device=device, name=name)
    return PyAVVideoDecoder(source, name=name)


def _open_on_gpu(
    source: str | BinaryIO, device: str, name: str, codec: str | None, gpu_fallback: GpuFallback
) -> TorchCodecVideoDecoder:
    """A torchcodec decoder on the GPU, or on the CPU where the GPU cannot decode the file (see open_video_decoder)."""
    gpu = gpu_of(device)
    refusals = REFUSALS.get()
    reason = refusals.reason(gpu, codec)
    if reason is None:
        decoder = TorchCodecVideoDecoder(source, device=gpu.device, name=name)
        refused = decoder.gpu_refusal()
        if refused is None:
            return decoder
        reason = refusals.found(gpu, decoder.codec or "unnamed", refused)
    if gpu_fallback == "error":
        raise VideoDecodeError(
            f"{name}: {reason}, and decoding=DecodeOptions(gpu_fallback='error') asks for GPU decoding only: "
            "decode this camera on the CPU (gpu_fallback='cpu'), or re-encode it to a codec the GPU decodes "
            "(`robostream transcode SRC OUT --codec h264`)"
        )
    return TorchCodecVideoDecoder(source, device="cpu", name=name, fallback=reason)
