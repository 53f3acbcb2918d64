"""Running per-sample plans on a batch of one camera with the batched kernels.

Plans differ in length and op order. On CPU each sample runs its own plan, one sample at a time: its float copy
stays in the caches through its ops (a batch's float copy does not fit: 25 MB at 256x256), and no sample is copied
out of the batch and back per op (measured: 1.7x faster at 256x256 than the steps below). On an accelerator, where
each kernel call is a launch, the batch goes step by step: at step j the samples whose j-th op is of one kind go
through that kind's kernel together, with their own parameters. Frames of a window share their sample's plan (the
kernels take [N, T, C, H, W]; a batch without a window gets T = 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch

from robostream.augment import cpu_kernels, kernels
from robostream.augment.params import AffineOp, FactorOp, Op, Plan

Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# torch operations: any device
DEVICE_KERNELS: dict[str, Kernel] = {
    "brightness": kernels.adjust_brightness,
    "contrast": kernels.adjust_contrast,
    "saturation": kernels.adjust_saturation,
    "hue": kernels.adjust_hue,
    "sharpness": kernels.adjust_sharpness,
    "affine": kernels.affine,
}
CPU_KERNELS: dict[str, Kernel] = {**DEVICE_KERNELS, "hue": cpu_kernels.adjust_hue, "affine": cpu_kernels.affine}


def apply_plans(
    images: torch.Tensor, plans: Sequence[Plan], *, path: Literal["cpu", "device"] | None = None
) -> torch.Tensor:
    """Augment images [B, C, H, W] or [B, T, C, H, W] (uint8 or float32 in [0, 1]) with one plan per sample.

    uint8 is computed as float32 x / 255 and returned as round(y * 255) clamped to 0..255; the result has the input's
    shape and dtype and the input is not modified.

    Args:
        images: one camera's batch.
        plans: B plans, in batch order.
        path: "cpu": one sample at a time with CPU_KERNELS (CPU tensors only); "device": step by step with
            DEVICE_KERNELS (any device); None: "cpu" for CPU tensors, else "device".
    """
    if images.dtype not in (torch.uint8, torch.float32):
        raise TypeError(f"camera images must be uint8 or float32, got {images.dtype}")
    if images.ndim not in (4, 5) or images.shape[0] != len(plans) or images.shape[-3] not in (1, 3):
        raise ValueError(
            f"camera images must be [B, C, H, W] or [B, T, C, H, W] with C 1 or 3 and B = {len(plans)} "
            f"plans, got shape {tuple(images.shape)}"
        )
    samples = images if images.ndim == 5 else images.unsqueeze(1)
    as_bytes = images.dtype == torch.uint8
    # On uint8, an affine that ends its plan picks from the rounded bytes: nearest-neighbour picks commute with the
    # rounding (fill 0 is 0 either way), and move a quarter of the bytes.
    last_picks = [s for s, plan in enumerate(plans) if as_bytes and plan.ops and isinstance(plan.ops[-1], AffineOp)]
    picked_last = set(last_picks)
    arithmetic = [plan.ops[:-1] if s in picked_last else plan.ops for s, plan in enumerate(plans)]
    on_cpu = (path or ("cpu" if images.device.type == "cpu" else "device")) == "cpu"
    if not any(arithmetic):  # a new, contiguous tensor whatever the input's layout: the input is never modified
        out = samples.clone(memory_format=torch.contiguous_format)
    else:
        out = (by_sample if on_cpu else by_step)(samples, arithmetic)
    if last_picks:
        matrices = _params([plans[s].ops[-1] for s in last_picks])
        sources = kernels.affine_sources(
            matrices, height=images.shape[-2], width=images.shape[-1], device=images.device
        )
        pick = cpu_kernels.pick_pixels if on_cpu else kernels.pick_pixels
        out[last_picks] = pick(out[last_picks], sources)
    return out.view(images.shape)


def by_sample(samples: torch.Tensor, ops: Sequence[Sequence[Op]]) -> torch.Tensor:
    """A new tensor: CPU samples [B, T, C, H, W] (uint8 or float32) with each sample's ops applied, one sample at a
    time (see the module docstring); uint8 as `apply_plans` describes.

    Args:
        samples: one camera's batch.
        ops: each sample's ops, in order.
    """
    out = torch.empty(samples.shape, dtype=samples.dtype)
    for sample, sample_ops in enumerate(ops):
        work = _to_float(samples[sample : sample + 1])
        for op in sample_ops:
            work = CPU_KERNELS[op.kind](work, _params([op]))
        out[sample] = _rounded(work, samples.dtype)[0]
    return out


def by_step(samples: torch.Tensor, ops: Sequence[Sequence[Op]]) -> torch.Tensor:
    """`by_sample` for any device, step by step over the batch (see the module docstring).

    Args:
        samples: one camera's batch.
        ops: each sample's ops, in order.
    """
    work = _to_float(samples)
    for step in range(max(len(sample_ops) for sample_ops in ops)):
        groups: dict[str, list[int]] = {}
        for sample, sample_ops in enumerate(ops):
            if step < len(sample_ops):
                groups.setdefault(sample_ops[step].kind, []).append(sample)
        for kind, members in groups.items():
            params = _params([ops[m][step] for m in members])
            if len(members) == len(ops):
                work = DEVICE_KERNELS[kind](work, params)
                continue
            adjusted = DEVICE_KERNELS[kind](torch.stack([work[m] for m in members]), params)
            for row, member in zip(adjusted, members, strict=True):
                work[member].copy_(row)
    return _rounded(work, samples.dtype).to(samples.dtype)


def _to_float(samples: torch.Tensor) -> torch.Tensor:
    """A new float32 tensor in [0, 1], contiguous whatever the input's layout (channels-last, a broadcast view): the
    kernels reshape freely."""
    work = samples.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
    return work.div_(255.0) if samples.dtype == torch.uint8 else work


def _rounded(work: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 work as values of `dtype`: round(y * 255) for uint8 (exact integers, for a cast), else as is."""
    if dtype != torch.uint8:
        return work
    # every kernel keeps values in [0, 1] (up to a rounding, which the rounding to bytes absorbs): no clamp
    return work.mul_(255.0).round_()


def _params(ops: list[Op]) -> torch.Tensor:
    # float64, so each kernel rounds a parameter to float32 once, as torchvision does with a Python float
    return torch.tensor([_op_params(op) for op in ops], dtype=torch.float64)


def _op_params(op: Op) -> float | list[float]:
    if isinstance(op, FactorOp):
        return op.factor
    return kernels.inverse_affine_matrix(angle=op.angle, translate=op.translate, scale=op.scale, shear=op.shear)
