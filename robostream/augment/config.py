"""Reading a lerobot `ImageTransformsConfig` (or any object with its fields) into validated transform specs.

Ranges are parsed as torchvision v2 / lerobot parse them (a number x -> [max(0, 1 - x), 1 + x], [-x, x] for hue,
degrees and shear; a (lo, hi) pair as given), so a config means here what it means to lerobot. Transforms of weight
<= 0 are skipped before any check, as lerobot skips them; everything else is checked even when `enable` is False, so a
bad config fails at construction rather than when someone turns augmentation on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

SUPPORTED = (
    "ColorJitter (brightness, contrast, saturation, hue), SharpnessJitter (sharpness), "
    "RandomAffine (degrees, translate, scale, shear; nearest interpolation, fill 0, centre of the image), Identity"
)

Range = tuple[float, float]


@dataclass(frozen=True)
class ColorJitterSpec:
    """Factor ranges of a ColorJitter; None: that adjustment is not applied (torchvision's None)."""

    brightness: Range | None = None
    contrast: Range | None = None
    saturation: Range | None = None
    hue: Range | None = None


@dataclass(frozen=True)
class SharpnessSpec:
    sharpness: Range


@dataclass(frozen=True)
class AffineSpec:
    """RandomAffine: translate holds the maximum fractions (x, y) of the width / height; shear 2 or 4 bounds."""

    degrees: Range
    translate: Range | None = None
    scale: Range | None = None
    shear: tuple[float, ...] | None = None


@dataclass(frozen=True)
class IdentitySpec:
    pass


TransformParams = ColorJitterSpec | SharpnessSpec | AffineSpec | IdentitySpec


@dataclass(frozen=True)
class TransformSpec:
    name: str
    params: TransformParams


@dataclass(frozen=True)
class AugmentSpec:
    """The transforms of weight > 0 in config order, their normalised weights, and how many to apply per draw.

    n_subset 0 means no augmentation (disabled, or no transform of weight > 0).
    """

    transforms: tuple[TransformSpec, ...]
    probabilities: tuple[float, ...]
    n_subset: int
    random_order: bool

    @functools.cached_property
    def probabilities_tensor(self) -> torch.Tensor:
        """`probabilities` as float32, the tensor lerobot's RandomSubsetApply draws its subset from."""
        return torch.tensor(self.probabilities, dtype=torch.float32)


def parse_config(config: Any) -> AugmentSpec:
    """Validate a duck-typed ImageTransformsConfig (`enable`, `max_num_transforms`, `random_order`, `tfs`).

    Args:
        config: lerobot's `ImageTransformsConfig` or an object with its fields; each `tfs` value has `weight`,
            `type` and `kwargs`.

    Raises:
        ValueError: an unsupported transform type or kwarg (naming the transform and type), a bad range (naming the
            key), or max_num_transforms < 1.
    """
    max_num = config.max_num_transforms
    if isinstance(max_num, bool) or not isinstance(max_num, int) or max_num < 1:
        raise ValueError(f"max_num_transforms must be an integer >= 1, got {max_num!r}")
    if not isinstance(config.tfs, Mapping):
        raise ValueError(f"tfs must be a mapping of name -> transform config, got {type(config.tfs).__name__}")
    transforms: list[TransformSpec] = []
    weights: list[float] = []
    for name, tf in config.tfs.items():
        weight = tf.weight
        if not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ValueError(f"image transform {name!r}: weight must be a finite number, got {weight!r}")
        if weight <= 0:
            continue
        transforms.append(TransformSpec(name=name, params=_parse_transform(name, tf.type, dict(tf.kwargs or {}))))
        weights.append(float(weight))
    total = sum(weights)
    n_subset = min(len(transforms), max_num) if config.enable else 0
    return AugmentSpec(
        transforms=tuple(transforms),
        probabilities=tuple(w / total for w in weights),
        n_subset=n_subset,
        random_order=bool(config.random_order),
    )


def _parse_transform(name: str, type_: str, kwargs: dict[str, Any]) -> TransformParams:
    where = f"image transform {name!r} (type {type_!r})"
    parsers: dict[str, Callable[[str, dict[str, Any]], TransformParams]] = {
        "ColorJitter": _color_jitter,
        "SharpnessJitter": _sharpness,
        "RandomAffine": _affine,
        "Identity": _identity,
    }
    if type_ not in parsers:
        raise ValueError(f"{where} is not supported by BatchImageTransforms; supported: {SUPPORTED}")
    return parsers[type_](where, kwargs)


def _check_keys(where: str, kwargs: dict[str, Any], allowed: Sequence[str]) -> None:
    for key in kwargs:
        if key not in allowed:
            raise ValueError(f"{where}: kwarg {key!r} is not supported (supported: {', '.join(allowed) or 'none'})")


def _numbers(where: str, key: str, value: Any, sizes: Sequence[int] = (2,)) -> tuple[float, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or len(value) not in sizes
        or not all(isinstance(v, int | float) for v in value)
    ):
        counts = " or ".join(str(n) for n in sizes)
        raise ValueError(f"{where}: {key} must be a number or a sequence of {counts} numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _jitter_range(where: str, key: str, value: Any, *, center: float, bound: Range, clip_at_zero: bool) -> Range:
    # torchvision's ColorJitter._check_input (SharpnessJitter's is the same with no upper bound)
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{where}: {key} given as a single number must be non-negative, got {value!r}")
        lo, hi = center - value, center + value
        if clip_at_zero:
            lo = max(lo, 0.0)
    else:
        lo, hi = _numbers(where, key, value)
    if not bound[0] <= lo <= hi <= bound[1]:
        raise ValueError(f"{where}: {key} must satisfy {bound[0]} <= min <= max <= {bound[1]}, got {value!r}")
    return float(lo), float(hi)


def _color_jitter(where: str, kwargs: dict[str, Any]) -> ColorJitterSpec:
    _check_keys(where, kwargs, ("brightness", "contrast", "saturation", "hue"))
    ranges: dict[str, Range | None] = {}
    for key, value in kwargs.items():
        if value is None:
            continue
        hue = key == "hue"
        center = 0.0 if hue else 1.0
        lo, hi = _jitter_range(
            where, key, value, center=center, bound=(-0.5, 0.5) if hue else (0.0, math.inf), clip_at_zero=not hue
        )
        # torchvision drops a range that can only give the neutral factor (it draws nothing for it)
        ranges[key] = None if lo == hi == center else (lo, hi)
    return ColorJitterSpec(**ranges)


def _sharpness(where: str, kwargs: dict[str, Any]) -> SharpnessSpec:
    _check_keys(where, kwargs, ("sharpness",))
    if "sharpness" not in kwargs:
        raise ValueError(f"{where}: kwarg 'sharpness' is required")
    return SharpnessSpec(
        _jitter_range(where, "sharpness", kwargs["sharpness"], center=1.0, bound=(0.0, math.inf), clip_at_zero=True)
    )


def _angles(where: str, key: str, value: Any, sizes: Sequence[int]) -> tuple[float, ...]:
    # torchvision's _setup_angle: a number x -> (-x, x); otherwise 2 (or 4 for shear) bounds, each pair increasing
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{where}: {key} given as a single number must be non-negative, got {value!r}")
        return -float(value), float(value)
    bounds = _numbers(where, key, value, sizes)
    if any(lo > hi for lo, hi in zip(bounds[::2], bounds[1::2], strict=True)):
        raise ValueError(f"{where}: {key} bounds must be (min, max) pairs with min <= max, got {value!r}")
    return bounds


def _affine(where: str, kwargs: dict[str, Any]) -> AffineSpec:
    _check_keys(where, kwargs, ("degrees", "translate", "scale", "shear", "interpolation", "fill", "center"))
    if "degrees" not in kwargs:
        raise ValueError(f"{where}: kwarg 'degrees' is required")
    degrees = _angles(where, "degrees", kwargs["degrees"], sizes=(2,))
    translate: Range | None = None
    scale: Range | None = None
    shear: tuple[float, ...] | None = None
    if kwargs.get("translate") is not None:
        x, y = _numbers(where, "translate", kwargs["translate"])
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
            raise ValueError(f"{where}: translate fractions must be in [0, 1], got {kwargs['translate']!r}")
        translate = (x, y)
    if kwargs.get("scale") is not None:
        low, high = _numbers(where, "scale", kwargs["scale"])
        if not 0.0 < low <= high:
            raise ValueError(f"{where}: scale must satisfy 0 < min <= max, got {kwargs['scale']!r}")
        scale = (low, high)
    if kwargs.get("shear") is not None:
        shear = _angles(where, "shear", kwargs["shear"], sizes=(2, 4))
    # the batched kernel implements torchvision's default sampling only
    interpolation = kwargs.get("interpolation")
    if interpolation is not None and getattr(interpolation, "value", interpolation) not in ("nearest", 0):
        raise ValueError(f"{where}: interpolation must be nearest, got {interpolation!r}")
    if kwargs.get("fill") not in (None, 0):
        raise ValueError(f"{where}: fill must be 0, got {kwargs['fill']!r}")
    if kwargs.get("center") is not None:
        raise ValueError(f"{where}: center must be None (the centre of the image), got {kwargs['center']!r}")
    return AffineSpec(
        degrees=(degrees[0], degrees[1]),
        translate=translate,
        scale=scale,
        shear=shear,
    )


def _identity(where: str, kwargs: dict[str, Any]) -> IdentitySpec:
    _check_keys(where, kwargs, ())
    return IdentitySpec()
