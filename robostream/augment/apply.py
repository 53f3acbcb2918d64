"""Running per-sample plans on a batch of one camera with the batched kernels.

Plans differ in length and op order, so the batch is processed step by step: at step j the samples whose j-th op is
of one kind go through that kind's kernel together, with their own parameters. Frames of a window share their
sample's plan (the kernels take [N, T, C, H, W]; a batch without a window gets T = 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from robostream.augment.kernels import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    adjust_sharpness,
    affine,
    inverse_affine_matrix,
)
from robostream.augment.params import FactorOp, Op, Plan

_KERNELS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "brightness": adjust_brightness,
    "contrast": adjust_contrast,
    "saturation": adjust_saturation,
    "hue": adjust_hue,
    "sharpness": adjust_sharpness,
    "affine": affine,
}


def apply_plans(images: torch.Tensor, plans: Sequence[Plan]) -> torch.Tensor:
    """Augment images [B, C, H, W] or [B, T, C, H, W] (uint8 or float32 in [0, 1]) with one plan per sample.

    uint8 is computed as float32 x / 255 and returned as round(y * 255) clamped to 0..255; the result has the input's
    shape and dtype and the input is not modified.

    Args:
        images: one camera's batch.
        plans: B plans, in batch order.
    """
    if images.dtype not in (torch.uint8, torch.float32):
        raise TypeError(f"camera images must be uint8 or float32, got {images.dtype}")
    if images.ndim not in (4, 5) or images.shape[0] != len(plans) or images.shape[-3] not in (1, 3):
        raise ValueError(
            f"camera images must be [B, C, H, W] or [B, T, C, H, W] with C 1 or 3 and B = {len(plans)} "
            f"plans, got shape {tuple(images.shape)}"
        )
    samples = images if images.ndim == 5 else images.unsqueeze(1)
    # contiguous whatever the input's layout (channels-last, a broadcast view): the kernels reshape freely
    work = samples.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
    if images.dtype == torch.uint8:
        work.div_(255.0)
    for step in range(max((len(plan.ops) for plan in plans), default=0)):
        groups: dict[str, list[int]] = {}
        for sample, plan in enumerate(plans):
            if step < len(plan.ops):
                groups.setdefault(plan.ops[step].kind, []).append(sample)
        for kind, members in groups.items():
            params = _params([plans[m].ops[step] for m in members])
            if len(members) == len(plans):
                work = _KERNELS[kind](work, params)
                continue
            # row by row: index_select / index_copy_ on [B, T, C, H, W] were 4x slower than these copies
            adjusted = _KERNELS[kind](torch.stack([work[m] for m in members]), params)
            for row, member in zip(adjusted, members, strict=True):
                work[member].copy_(row)
    if images.dtype == torch.uint8:
        work = work.mul_(255.0).round_().clamp_(0.0, 255.0).to(torch.uint8)
    return work.view(images.shape)


def _params(ops: list[Op]) -> torch.Tensor:
    # float64, so each kernel rounds a parameter to float32 once, as torchvision does with a Python float
    return torch.tensor([_op_params(op) for op in ops], dtype=torch.float64)


def _op_params(op: Op) -> float | list[float]:
    if isinstance(op, FactorOp):
        return op.factor
    return inverse_affine_matrix(angle=op.angle, translate=op.translate, scale=op.scale, shear=op.shear)
