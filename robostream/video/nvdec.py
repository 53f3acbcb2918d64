"""Which codecs a GPU's NVDEC engine decodes: where a camera asked to decode on "cuda" can be decoded.

From NVIDIA's NVDEC support matrix (Video Codec SDK 13.0 application note): H.264, HEVC and VP9 from Pascal on;
AV1 only on GA10x (compute 8.6/8.7), Ada (8.9) and Blackwell (10.x, 12.x), so **not on A100 (8.0), H100 or H200
(9.0)**, the GPUs most training runs on, while AV1 is lerobot's default codec. The table decides before a decoder
is opened when the camera's codec is known (info.json's `video.codec`); otherwise, and for what the table lets
through, the open itself is the probe: torchcodec's NVDEC decoder says whether it fell back to the CPU (a profile,
size or pixel format the engine refuses), and that verdict is kept for the process and codec.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import torch

from robostream.process_local import ProcessLocal

# Decoded by NVDEC on every GPU from Pascal (compute 6.x) on; Maxwell (5.x) and older decode HEVC and VP9 on a few
# chips only, so the table leaves them to the probe.
PASCAL_ON = frozenset({"h264", "hevc", "vp9", "vp8", "mpeg1video", "mpeg2video", "mpeg4", "vc1", "mjpeg"})
OLDER = frozenset({"h264", "mpeg1video", "mpeg2video", "mpeg4", "vc1"})
AV1_BEFORE_BLACKWELL = frozenset({(8, 6), (8, 7), (8, 9)})  # GA10x, Orin, Ada; not GA100 (8.0) nor Hopper (9.0)


@dataclass(frozen=True)
class Gpu:
    """A CUDA device as the routing names it."""

    device: str  # "cuda:N"
    name: str  # e.g. "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int]  # compute capability (major, minor)

    def __str__(self) -> str:
        return f"{self.name} ({self.device}, compute {self.capability[0]}.{self.capability[1]})"


def nvdec_codecs(capability: tuple[int, int]) -> frozenset[str]:
    """FFmpeg codec names the NVDEC engine of a GPU of this compute capability decodes."""
    if capability[0] < 6:
        return OLDER
    if capability in AV1_BEFORE_BLACKWELL or capability[0] >= 10:
        return PASCAL_ON | {"av1"}
    return PASCAL_ON


@functools.cache
def gpu_of(device: str) -> Gpu:
    """The GPU behind a device string ("cuda" is the current device). Initialises CUDA in this process, which
    decoding on it does anyway."""
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    return Gpu(f"cuda:{index}", torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))


class Refusals:
    """Why a GPU does not decode a codec, as the table says or a probe found (kept per process: one probe per
    GPU and codec)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple[Gpu, str], str] = {}

    def reason(self, gpu: Gpu, codec: str | None) -> str | None:
        """Why `gpu` does not decode `codec` (None: it does, or nothing says otherwise yet: open and see)."""
        if codec is None:
            return None
        with self._lock:
            found = self._found.get((gpu, codec))
        if found is not None:
            return found
        if codec not in nvdec_codecs(gpu.capability):
            return f"NVDEC on {gpu} does not decode {codec} (NVIDIA's NVDEC support matrix)"
        return None

    def found(self, gpu: Gpu, codec: str, reason: str) -> str:
        """Record a probe's verdict; returns the reason as the routing states it."""
        stated = f"NVDEC on {gpu} does not decode this {codec} stream ({reason})"
        with self._lock:
            self._found[(gpu, codec)] = stated
        return stated


REFUSALS = ProcessLocal(Refusals)  # this process's: a verdict holds for every dataset the process reads
