"""Frames decoded from their own packets' bytes: a remote random frame costs its packets, not 64 KiB reads.

torchcodec reads a file object through FFmpeg's 64 KiB buffer, filled whole whatever the frame needs, so a random
frame of a 128x128 camera (2-5 KB of packets from its keyframe) costs 64+ KiB fetched (BENCHMARKS.md, ninth
session). The packet index (video/packet_index.py) knows every packet's offset, size and times: here a PyAV codec
context, made once per file from its stream's parameters, is fed exactly the packets from a frame's keyframe to the
last one it is in, cut from bytes fetched exactly (storage/exact_ranges.py), and flushed between runs; its frames
are converted to RGB as torchcodec converts them (the same FFmpeg conversion: bit-identical,
benchmarks/packet_decode.py and tests/video/test_packet_frames.py).

The file stays open in torchcodec too: its header gives the frame rate, size and stream end the datasets check, and
it decodes what this path does not serve: files whose frames are off the fps grid (found by time instead) or shown
before their keyframe (HEVC open GOP), and any frame this path could not produce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter

from robostream.errors import VideoDecodeError
from robostream.video.decoder import TorchCodecVideoDecoder, count_jumps
from robostream.video.packet_index import PacketIndex

# The colour descriptions whose RGB conversion every PyAV agrees with torchcodec on: BT.601 (or unspecified, which
# FFmpeg converts as BT.601), limited range. Others are left to torchcodec: PyAV 15 (lerobot's) converts a BT.709
# frame up to 18 levels away from torchcodec 0.11, PyAV 18 does not (tests/video/test_packet_frames.py).
DEFAULT_MATRICES = (2, 5, 6)  # AVColorSpace: unspecified, BT470BG, SMPTE170M
LIMITED_RANGES = (0, 1)  # AVColorRange: unspecified, MPEG


class PacketSource(Protocol):
    """A remote file's version (storage/store.py's RangedReader): readable by PyAV, and its exact byte spans."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...

    def take_exact(self, start: int, end: int) -> bytes: ...


def on_fps_grid(index: PacketIndex, *, begin_s: float, fps: float, num_frames: int) -> bool:
    """Whether torchcodec's frame i (approximate seek mode: the first frame shown at or after begin_s + i / fps, in
    ticks rounded) is the index's i-th frame shown, for every i: each frame's pts lies in [grid i, grid i + 1)."""
    shown = np.sort(index.pts)
    if len(shown) != num_frames or fps <= 0:
        return False
    grid = np.rint((begin_s + np.arange(num_frames + 1) / fps) * index.timescale)
    return bool(np.all((grid[:-1] <= shown) & (shown < grid[1:])))


class PacketFrames:
    """A torchcodec decoder of a remote file whose frames by index are decoded from their own packets."""

    def __init__(self, decoder: TorchCodecVideoDecoder, *, packets: PacketSource, index: PacketIndex) -> None:
        """
        Args:
            decoder: torchcodec's decoder of the file (its header, and the frames this path does not serve).
            packets: a reader of the same file version, its own (FFmpeg keeps the decoder's reader's position):
                the packets' bytes are taken through it (`RangedReader.take_exact`), and PyAV reads the stream's
                parameters from it here.
            index: the file's packet index.
        """
        self._decoder, self._packets, self._index = decoder, packets, index
        self.path, self.device, self.fallback = decoder.path, decoder.device, decoder.fallback
        self.fps, self.num_frames, self.end_s = decoder.fps, decoder.num_frames, decoder.end_s
        self.height, self.width = decoder.height, decoder.width
        self.calls = self.seeks = 0
        self._last: int | None = None
        self._order = np.argsort(index.pts, kind="stable")  # frame i (presentation order) -> its packet
        servable = not index.has_leading_frames and on_fps_grid(
            index, begin_s=decoder.begin_s, fps=decoder.fps, num_frames=decoder.num_frames
        )
        self._reformatter = VideoReformatter()
        self._context: Any = self._codec_context(packets) if servable else None
        self.served = self._context is not None  # frames by index come from packets (else all from torchcodec)

    @staticmethod
    def _codec_context(packets: PacketSource) -> Any:
        """A decoder of the file's video stream with its parameters (None: PyAV cannot make one, or the stream's
        colour description is one PyAV versions convert differently; torchcodec then decodes every frame)."""
        try:
            with av.open(packets, "r") as container:
                stream = container.streams.video[0].codec_context
                if stream.colorspace not in DEFAULT_MATRICES or stream.color_range not in LIMITED_RANGES:
                    return None
                context = av.CodecContext.create(stream.name, "r")
                context.extradata = stream.extradata
                # The container's colour description (its colr box), which the bitstream may lack: without it the
                # frames would convert to RGB as unspecified (BT.601) while torchcodec converts as described.
                for name in ("colorspace", "color_range", "color_primaries", "color_trc"):
                    setattr(context, name, getattr(stream, name))
        except (av.FFmpegError, IndexError, ValueError, AttributeError):
            return None
        finally:
            packets.seek(0)
        context.thread_count = 1  # a frame comes out of the packet that completes it
        return context

    def get_frames_by_index(self, indices: Sequence[int]) -> tuple[torch.Tensor, np.ndarray]:
        if not self.served:
            return self._decoder.get_frames_by_index(indices)
        self.calls += 1
        self.seeks += count_jumps(self._last, indices)
        self._last = int(indices[-1])
        asked, inverse = np.unique(np.asarray(indices, dtype=np.int64), return_inverse=True)  # each frame once
        targets = self._order[asked]
        shown_s = self._index.pts[targets] / self._index.timescale
        first, last = self._index.packets(shown_s, shown_s)
        last = np.maximum(last, targets)
        out = np.empty((len(targets), self.height, self.width, 3), dtype=np.uint8)
        slot = {int(self._index.pts[t]): i for i, t in enumerate(targets)}
        found: set[int] = set()
        try:
            self._decode(first, last, targets, slot, found, out)
        finally:
            self._context.flush_buffers()
        return torch.from_numpy(out[inverse]).permute(0, 3, 1, 2), shown_s[inverse].astype(np.float64)

    def _decode(
        self,
        first: np.ndarray,
        last: np.ndarray,
        targets: np.ndarray,
        slot: dict[int, int],
        found: set[int],
        out: np.ndarray,
    ) -> None:
        """Per keyframe the targets decode from, in file order: its packets through the last any of them needs, fed
        once (drained once if the decoder holds frames back: H.264 B-frames), keeping the frames asked for."""
        index, context = self._index, self._context
        for keyframe in np.unique(first).tolist():
            group = np.flatnonzero(first == keyframe)
            wanted = {int(index.pts[t]) for t in targets[group]}
            if wanted <= found:
                continue
            stop = int(last[group].max()) + 1
            context.flush_buffers()
            base = int(index.pos[keyframe])
            data = self._packets.take_exact(base, int(index.reach[stop - 1]))
            for i in range(keyframe, stop):
                offset = int(index.pos[i]) - base
                packet = av.Packet(data[offset : offset + int(index.size[i])])
                packet.pts, packet.dts = int(index.pts[i]), int(index.dts[i])
                self._keep(context.decode(packet), slot, found, out)
            if not wanted <= found:
                self._keep(context.decode(None), slot, found, out)
            missing = sorted(wanted - found)
            if missing:
                raise VideoDecodeError(
                    f"{self.path}: frames at pts {missing[:4]} did not come out of packets {keyframe}-{stop - 1}"
                )

    def _keep(self, frames: list[Any], slot: dict[int, int], found: set[int], out: np.ndarray) -> None:
        for frame in frames:
            at = slot.get(frame.pts)
            if at is not None and frame.pts not in found:
                # One reformatter kept: `to_ndarray(format=)` makes a new conversion context per frame (0.57 vs 0.08
                # ms per 128x128 frame), with the same output.
                out[at] = self._reformatter.reformat(frame, format="rgb24").to_ndarray()
                found.add(frame.pts)

    def get_frames_near_times(self, times_s: Sequence[float]) -> tuple[torch.Tensor, np.ndarray]:
        return self._decoder.get_frames_near_times(times_s)
