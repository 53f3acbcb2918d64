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


def frames_chw(frames: torch.Tensor, picks: np.ndarray) -> list[torch.Tensor]:
    """frames[picks] as separate contiguous (C, H, W) tensors. Frames held for a while are allocated one by one:
    equal-sized blocks that the allocator reuses, where blocks of varying sizes fragment the heap (with glibc,
    ~50 MiB more resident per DataLoader worker in the streaming benchmark)."""
    out = []
    for pick in picks.tolist():
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
