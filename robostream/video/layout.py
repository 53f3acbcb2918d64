"""Decoded frames laid out as the samples hold them: contiguous (C, H, W).

Decoders produce packed RGB (H, W, C) frames and hand them out as (C, H, W) views. Changing the layout is a
de-interleave of every pixel's channels; torch's strided copy does it a byte at a time (~70 us for a 256x256 frame
out of cache), OpenCV's `split` with SIMD in ~16 us, so CPU frames go through OpenCV.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch


def gather_chw(frames: torch.Tensor, picks: np.ndarray) -> torch.Tensor:
    """frames[picks] as one new contiguous (n, C, H, W) tensor; frames is (N, C, H, W), usually a view of packed
    (N, H, W, C) decoder output."""
    out = torch.empty((len(picks), *frames.shape[1:]), dtype=frames.dtype, device=frames.device)
    for slot, pick in zip(out, picks.tolist()):
        copy_chw(slot, frames[pick])
    return out


class FramePool:
    """Frame buffers of one process for reuse: the streaming batch path hands back the frames it has copied into a
    batch, and the next decoded frames are laid out in them. A fresh 192 KiB block per frame costs page faults on
    first touch (glibc maps blocks that size anew, or trims and regrows its heap), about as much as the layout copy
    itself; reused buffers are warm and keep the heap from fragmenting."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes  # buffers given back beyond this are left to the allocator
        self._free: dict[tuple[tuple[int, ...], torch.dtype], list[torch.Tensor]] = {}
        self._bytes = 0
        self.reused = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        free = self._free.get((tuple(shape), dtype))
        if free:
            self.reused += 1
            frame = free.pop()
            self._bytes -= frame.untyped_storage().nbytes()
            return frame
        return torch.empty(shape, dtype=dtype)

    def give(self, frames: list[torch.Tensor]) -> None:
        """Take back frames nobody reads any more; only whole CPU tensors (not views of a larger one) are kept."""
        for frame in frames:
            size = frame.untyped_storage().nbytes()
            if self._bytes + size > self.max_bytes:
                return
            if (
                frame.device.type == "cpu"
                and frame.storage_offset() == 0
                and frame.is_contiguous()
                and size == frame.numel() * frame.element_size()
            ):
                self._free.setdefault((tuple(frame.shape), frame.dtype), []).append(frame)
                self._bytes += size


def frames_chw(frames: torch.Tensor, picks: np.ndarray, pool: FramePool | None = None) -> list[torch.Tensor]:
    """frames[picks] as separate contiguous (C, H, W) tensors (from `pool` where given: CPU frames only). Frames
    held for a while are allocated one by one: equal-sized blocks that are reused, where blocks of varying sizes
    fragment the heap."""
    out = []
    for pick in picks.tolist():
        if pool is not None and frames.device.type == "cpu":
            frame = pool.take(frames.shape[1:], frames.dtype)
        else:
            frame = torch.empty(frames.shape[1:], dtype=frames.dtype, device=frames.device)
        copy_chw(frame, frames[pick])
        out.append(frame)
    return out


def copy_chw(target: torch.Tensor, frame: torch.Tensor) -> None:
    """Copy one (C, H, W) frame, whatever its strides, into the contiguous (C, H, W) `target`."""
    packed = frame.permute(1, 2, 0)
    if frame.device.type != "cpu" or not packed.is_contiguous() or frame.dtype != torch.uint8:
        target.copy_(frame)
        return
    planes = list(target.numpy())
    written = cv2.split(packed.numpy(), planes)
    # OpenCV silently allocates new planes when the given ones do not fit: never hand out unwritten memory.
    if len(written) != len(planes) or any(w is not p for w, p in zip(written, planes)):
        raise RuntimeError(f"cv2.split did not write into the (C, H, W) planes of a {tuple(packed.shape)} frame")
