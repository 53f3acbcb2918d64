"""How a dataset's videos are decoded (`DecodeOptions`): where, and how many decoders a process keeps open."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from robostream.numbers import finite_number

DEFAULT_DECODE_DEVICE = "cpu"
GpuFallback = Literal["cpu", "error"]  # a camera the GPU cannot decode: decoded on the CPU, or refused


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """Where videos are decoded and how many decoders a process keeps open (both datasets' `decoding=`; which
    decoder library is the dataset's `video_backend`, lerobot's argument).

    Args:
        device: "cpu", or "cuda"/"cuda:N" for NVDEC (CUDA builds of torch and torchcodec, video_backend
            "torchcodec").
        gpu_fallback: on a GPU, a camera whose codec its NVDEC does not decode (AV1 on A100, H100, H200: see
            video/nvdec.py): "cpu" decodes that camera on the CPU (one warning per camera and process; counted in
            `frame_counts()["frames_decoded_cpu_fallback"]`, and `camera_decoders()` says which decoder serves each
            camera), "error" refuses it with the reason (GPU decoding only). Re-encode such cameras for the GPU with
            `robostream transcode`.
        decoders_kept: open decoders kept per process. Default: streaming 8 beyond those of the live pieces,
            shared by a mixture's sources (open decoders and file descriptors grow with the live pieces, not with
            the sources); map-style 2 per camera, at least 4 (each camera's current file and the next).
    """

    device: str = DEFAULT_DECODE_DEVICE
    gpu_fallback: GpuFallback = "cpu"
    decoders_kept: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ValueError(f"device={self.device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        if self.gpu_fallback not in get_args(GpuFallback):
            raise ValueError(f"gpu_fallback={self.gpu_fallback!r}: expected one of {get_args(GpuFallback)}")
        if self.decoders_kept is not None:
            finite_number(self.decoders_kept, what="decoders_kept", integer=True, minimum=1)
