"""Per-sample augmentation plans: which transforms, in which order, with which parameters, from a per-sample seed.

A plan is drawn with a private `torch.Generator` seeded by `sample_seed(seed, epoch, dataset_index, index, camera)`,
making exactly the calls lerobot's `RandomSubsetApply` and the torchvision v2 / lerobot transforms make on the global
RNG, in the same order (multinomial, then each applied transform's `make_params`). So the distribution is lerobot's,
and `torch.manual_seed(plan.seed)` before lerobot's `ImageTransforms` replays the very same draw.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Literal

import torch

from robostream.augment.config import (
    AffineSpec,
    AugmentSpec,
    ColorJitterSpec,
    SharpnessSpec,
    TransformParams,
)

FactorKind = Literal["brightness", "contrast", "saturation", "hue", "sharpness"]
# torchvision ColorJitter's fn_idx numbering
_JITTER_ORDER: tuple[FactorKind, ...] = ("brightness", "contrast", "saturation", "hue")


@dataclass(frozen=True)
class FactorOp:
    """One adjustment with torchvision's factor (hue in turns, [-0.5, 0.5])."""

    kind: FactorKind
    factor: float


@dataclass(frozen=True)
class AffineOp:
    """torchvision `F.affine` parameters: degrees, whole pixels (tx, ty), isotropic scale, shear degrees (x, y)."""

    angle: float
    translate: tuple[int, int]
    scale: float
    shear: tuple[float, float]
    kind: Literal["affine"] = "affine"


Op = FactorOp | AffineOp


@dataclass(frozen=True)
class Plan:
    """The draw of one (sample, camera): the generator seed, the transforms' names in applied order, the ops."""

    seed: int
    transforms: tuple[str, ...]
    ops: tuple[Op, ...]


def sample_seed(*, seed: int, epoch: int, dataset_index: int, index: int, camera: int) -> int:
    """A 64-bit generator seed for one (sample, camera): blake2b of the five integers.

    Args:
        seed: the run's seed.
        epoch: the epoch.
        dataset_index: the sample's source in a mixture (0 for a single dataset).
        index: the sample's global frame index in its source.
        camera: the camera's position in the transform's camera_keys.
    """
    packed = struct.pack("<5q", seed, epoch, dataset_index, index, camera)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little")


def draw_plan(spec: AugmentSpec, *, seed: int, height: int, width: int) -> Plan:
    """Draw one plan as lerobot's `ImageTransforms` would on an image of height x width.

    Args:
        spec: the parsed config; spec.n_subset must be >= 1.
        seed: the generator seed (`sample_seed`).
        height: image height, for RandomAffine's vertical translation range.
        width: image width, for its horizontal range.
    """
    draws = _Draws(torch.Generator().manual_seed(seed))
    chosen = torch.multinomial(spec.probabilities_tensor, spec.n_subset, generator=draws.generator).tolist()
    if not spec.random_order:
        chosen.sort()
    names: list[str] = []
    ops: list[Op] = []
    for i in chosen:
        transform = spec.transforms[i]
        names.append(transform.name)
        ops.extend(_draw_ops(transform.params, draws, height=height, width=width))
    return Plan(seed=seed, transforms=tuple(names), ops=tuple(ops))


class _Draws:
    """A plan's generator and the one float32 the uniform draws go through."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self._one = torch.empty(1, dtype=torch.float32)

    def uniform(self, bounds: tuple[float, float]) -> float:
        # torch.empty(1).uniform_(lo, hi).item(), the draw every torchvision v2 / lerobot transform makes
        return self._one.uniform_(bounds[0], bounds[1], generator=self.generator).item()


def _draw_ops(params: TransformParams, draws: _Draws, *, height: int, width: int) -> list[Op]:
    if isinstance(params, ColorJitterSpec):
        return _draw_color_jitter(params, draws)
    if isinstance(params, SharpnessSpec):
        return [FactorOp("sharpness", draws.uniform(params.sharpness))]
    if isinstance(params, AffineSpec):
        return [_draw_affine(params, draws, height=height, width=width)]
    return []  # Identity draws nothing


def _draw_color_jitter(spec: ColorJitterSpec, draws: _Draws) -> list[Op]:
    # ColorJitter.make_params: the order permutation first, then one factor per enabled adjustment
    order = torch.randperm(4, generator=draws.generator).tolist()
    factors = {kind: draws.uniform(bounds) for kind in _JITTER_ORDER if (bounds := getattr(spec, kind)) is not None}
    return [FactorOp(_JITTER_ORDER[i], factors[_JITTER_ORDER[i]]) for i in order if _JITTER_ORDER[i] in factors]


def _draw_affine(spec: AffineSpec, draws: _Draws, *, height: int, width: int) -> AffineOp:
    # RandomAffine.make_params, draw for draw
    angle = draws.uniform(spec.degrees)
    translate = (0, 0)
    if spec.translate is not None:
        max_dx = float(spec.translate[0] * width)
        max_dy = float(spec.translate[1] * height)
        translate = (int(round(draws.uniform((-max_dx, max_dx)))), int(round(draws.uniform((-max_dy, max_dy)))))
    scale = 1.0 if spec.scale is None else draws.uniform(spec.scale)
    shear_x = shear_y = 0.0
    if spec.shear is not None:
        shear_x = draws.uniform((spec.shear[0], spec.shear[1]))
        if len(spec.shear) == 4:
            shear_y = draws.uniform((spec.shear[2], spec.shear[3]))
    return AffineOp(angle=angle, translate=translate, scale=scale, shear=(shear_x, shear_y))
