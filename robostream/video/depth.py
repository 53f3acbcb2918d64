"""Depth maps from the 12-bit codes of a depth camera's video (lerobot's depth_utils formula; the writers' way
back is writer/depth.py: codes_from_depths).

Decoding is a table lookup: there are only 4096 codes, so each camera's table is computed once, with lerobot's
torch operations in lerobot's order (`dequantize_depth`'s torch path, the one its reader takes). Every entry is
then bit-equal to what lerobot returns for that code; numpy's float32 exp differs by an ulp on ~40% of the codes
in log mode, which the 3.5 m shift magnifies to ~2e-6 m.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from robostream.format.depth import DEPTH_CODES, MM_PER_METRE, DepthCoding, DepthUnit

_UINT16_MAX = 65535.0


def _scale_offset(coding: DepthCoding) -> tuple[float, float]:
    """Depth (or log depth) per code and at code 0, in metres: Python doubles, as lerobot computes them."""
    if coding.use_log:
        low, high = math.log(coding.depth_min + coding.shift), math.log(coding.depth_max + coding.shift)
        return (high - low) / (DEPTH_CODES - 1), low
    return (coding.depth_max - coding.depth_min) / (DEPTH_CODES - 1), coding.depth_min


@functools.cache
def depth_table(coding: DepthCoding, unit: DepthUnit) -> np.ndarray:
    """float32 depth in `unit` of each code 0..4095: lerobot's `dequantize_depth` (torch path), op for op."""
    scale, offset = _scale_offset(coding)
    table = torch.arange(DEPTH_CODES, dtype=torch.float32)
    table.mul_(scale).add_(offset)
    if coding.use_log:
        table.exp_().sub_(coding.shift)
    table.clamp_(coding.depth_min, coding.depth_max)
    if unit == "mm":  # lerobot's float32 millimetres: whole numbers
        table.mul_(MM_PER_METRE).round_().clamp_(0.0, _UINT16_MAX)
    table = table.numpy()
    table.flags.writeable = False
    return table


def depths_from_codes(codes: torch.Tensor, coding: DepthCoding, unit: DepthUnit) -> torch.Tensor:
    """float32 depths in `unit`, shaped like `codes` (integer 12-bit codes, any shape, on the CPU)."""
    return torch.from_numpy(np.take(depth_table(coding, unit), codes.numpy()))
