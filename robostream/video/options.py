"""How a dataset's videos are decoded (`DecodeOptions`): where, and how many decoders a process keeps open."""

from __future__ import annotations

import re
from dataclasses import dataclass

from robostream.numbers import finite_number

DEFAULT_DECODE_DEVICE = "cpu"


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """Where videos are decoded and how many decoders a process keeps open (both datasets' `decoding=`; which
    decoder library is the dataset's `video_backend`, lerobot's argument).

    Args:
        device: "cpu", or "cuda"/"cuda:N" for NVDEC (CUDA builds of torch and torchcodec, video_backend
            "torchcodec").
        decoders_kept: open decoders kept per process. Default: streaming 8 beyond those of the live pieces,
            shared by a mixture's sources (open decoders and file descriptors grow with the live pieces, not with
            the sources); map-style 2 per camera, at least 4 (each camera's current file and the next).
    """

    device: str = DEFAULT_DECODE_DEVICE
    decoders_kept: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ValueError(f"device={self.device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        if self.decoders_kept is not None:
            finite_number(self.decoders_kept, what="decoders_kept", integer=True, minimum=1)
