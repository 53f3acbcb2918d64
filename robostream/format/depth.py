"""Depth cameras: which video features info.json marks as depth maps, and how their 12-bit codes map to depths and
back (lerobot's depth_utils formulas; the codes themselves are a video's gray12 plane, see video/decoder.py).

lerobot 0.6.1 marks a depth camera with `info.is_depth_map: true` (older spellings: `info["video.is_depth_map"]`,
or `video.is_depth_map` in a `video_info` block) and records its log or linear quantisation beside the marker
(`video.depth_min`, `video.depth_max`, `video.shift` in metres, `video.use_log`) with `depth_unit`, the unit the
frames were recorded in (which the stats are in). lerobot falls back to its encoder defaults for missing
parameters and reads them from `info` only, so a `video_info` block's own parameters are ignored and its depths
come back wrong (up to ~4 m, a lerobot bug). Here the parameters are read from the block that carries the marker,
and a depth feature without them, or with values that are not finite, is refused: guessing would return
plausible-looking wrong depths.

Decoding is a table lookup: there are only 4096 codes, so each camera's table is computed once, with lerobot's
torch operations in lerobot's order (`dequantize_depth`'s torch path, the one its reader takes). Every entry is
then bit-equal to what lerobot returns for that code; numpy's float32 exp differs by an ulp on ~40% of the codes
in log mode, which the 3.5 m shift magnifies to ~2e-6 m. torch is imported when a table is first built, so the
tools that only parse or write datasets (convert, synth) never load it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from robostream.errors import DatasetFormatError

DepthUnit = Literal["m", "mm"]
DEPTH_UNITS: tuple[DepthUnit, ...] = ("m", "mm")
DEFAULT_DEPTH_UNIT: DepthUnit = "mm"  # lerobot's DEFAULT_DEPTH_UNIT
MM_PER_METRE = 1000.0
DEPTH_CODES = 4096  # 12-bit codes 0..4095 (lerobot's DEPTH_QMAX + 1)
_UINT16_MAX = 65535.0  # lerobot clamps millimetres to uint16's range
_MARKER = "is_depth_map"
_PARAMETERS = ("depth_min", "depth_max", "shift", "use_log")


@dataclass(frozen=True)
class DepthCoding:
    """How one depth camera's 12-bit codes map to depths (metres), and the unit its frames were recorded in.

    depth_min, depth_max, shift: metres; code 0 is depth_min and code 4095 depth_max. use_log: codes are spaced
    in log(depth + shift), else linearly. recorded_unit: `depth_unit`, the unit of the raw frames and the stats
    (None: not recorded; the stats are then left as they are, as lerobot does).
    """

    depth_min: float
    depth_max: float
    shift: float
    use_log: bool
    recorded_unit: DepthUnit | None


def _marker_block(feature: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The block of a feature that marks it a depth map (`info`, or the legacy `video_info`), else None."""
    info = feature.get("info") or {}
    if info.get(_MARKER) or info.get(f"video.{_MARKER}"):
        return info
    video_info = feature.get("video_info") or {}
    if video_info.get(f"video.{_MARKER}"):
        return video_info
    return None


def is_depth_feature(feature: Mapping[str, Any]) -> bool:
    """True for a feature marked as a depth map (lerobot's `depth_keys` rule)."""
    return _marker_block(feature) is not None


def depth_coding(feature: Mapping[str, Any], *, key: str, source: str) -> DepthCoding:
    """The quantisation of depth feature `key`, read from the block that marks it.

    Args:
        feature: the feature's info.json entry.
        key: its name (for errors).
        source: the info.json it came from (for errors).

    Raises:
        DatasetFormatError: a parameter is missing, not a finite number, or the range is empty; naming the key.
    """
    block = _marker_block(feature)
    if block is None:
        raise DatasetFormatError(f"{source}: feature {key!r} is not marked as a depth map")
    where = f"{source}: depth feature {key!r}"
    missing = [f"video.{name}" for name in _PARAMETERS if block.get(f"video.{name}") is None]
    if missing:
        raise DatasetFormatError(
            f"{where} lacks its quantisation parameters {missing}: without them its 12-bit codes cannot be turned "
            "into depths. Add them to the feature's info (lerobot's depth encoder writes video.depth_min 0.01, "
            "video.depth_max 10.0, video.shift 3.5, video.use_log true unless told otherwise) or re-write the dataset"
        )
    values = {}
    for name in ("depth_min", "depth_max", "shift"):
        value = block[f"video.{name}"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DatasetFormatError(
                f"{where}: video.{name} is {value!r}, not a finite number of metres; fix it in meta/info.json"
            )
        values[name] = float(value)
    use_log = block["video.use_log"]
    if not isinstance(use_log, bool):
        raise DatasetFormatError(f"{where}: video.use_log is {use_log!r}, not true or false; fix it in meta/info.json")
    if not values["depth_min"] < values["depth_max"]:
        raise DatasetFormatError(
            f"{where}: video.depth_min {values['depth_min']} is not below video.depth_max "
            f"{values['depth_max']}; fix them in meta/info.json"
        )
    if use_log and values["depth_min"] + values["shift"] <= 0:
        raise DatasetFormatError(
            f"{where}: log quantisation needs video.depth_min + video.shift > 0, got "
            f"{values['depth_min']} + {values['shift']}; fix them in meta/info.json"
        )
    unit = (feature.get("info") or {}).get("depth_unit", block.get("depth_unit"))
    if unit is not None and unit not in DEPTH_UNITS:
        raise DatasetFormatError(
            f"{where}: depth_unit is {unit!r}, expected one of {DEPTH_UNITS}; fix it in meta/info.json"
        )
    return DepthCoding(values["depth_min"], values["depth_max"], values["shift"], use_log, unit)


def check_depth_unit(unit: Any) -> DepthUnit:
    """`unit` as a depth output unit, or a ValueError naming the choices."""
    if unit not in DEPTH_UNITS:
        raise ValueError(f"depth_output_unit={unit!r}: expected one of {DEPTH_UNITS}")
    return unit


def rescale_depth_stats(
    stats: Mapping[str, Mapping[str, np.ndarray]], codings: Mapping[str, DepthCoding], unit: DepthUnit
) -> dict[str, dict[str, np.ndarray]]:
    """`stats` with each depth camera's in `unit`: every statistic but `count` times 1000 (m -> mm) or / 1000,
    from its recorded unit; cameras without a recorded unit are left as they are (lerobot's rescale_depth_stats,
    without its in-place edit). lerobot's depth stats are of the raw recorded frames (not clamped to the coding's
    range), so they may exceed the depths a sample can hold."""
    out = {key: dict(values) for key, values in stats.items()}
    for key, coding in codings.items():
        if key not in out or coding.recorded_unit in (None, unit):
            continue
        factor = MM_PER_METRE if coding.recorded_unit == "m" else 1.0 / MM_PER_METRE
        out[key] = {stat: value if stat == "count" else value * factor for stat, value in out[key].items()}
    return out


def _scale_offset(coding: DepthCoding) -> tuple[float, float]:
    """Depth (or log depth) per code and at code 0, in metres: Python doubles, as lerobot computes them."""
    if coding.use_log:
        low, high = math.log(coding.depth_min + coding.shift), math.log(coding.depth_max + coding.shift)
        return (high - low) / (DEPTH_CODES - 1), low
    return (coding.depth_max - coding.depth_min) / (DEPTH_CODES - 1), coding.depth_min


@functools.cache
def depth_table(coding: DepthCoding, unit: DepthUnit) -> np.ndarray:
    """float32 depth in `unit` of each code 0..4095 (read-only): lerobot's `dequantize_depth` (torch path), op
    for op."""
    import torch

    scale, offset = _scale_offset(coding)
    table = torch.arange(DEPTH_CODES, dtype=torch.float32)
    table.mul_(scale).add_(offset)
    if coding.use_log:
        table.exp_().sub_(coding.shift)
    table.clamp_(coding.depth_min, coding.depth_max)
    if unit == "mm":  # lerobot's float32 millimetres: whole numbers
        table.mul_(MM_PER_METRE).round_().clamp_(0.0, _UINT16_MAX)
    values = table.numpy()
    values.flags.writeable = False
    return values


def depths_from_codes(codes: np.ndarray, coding: DepthCoding, unit: DepthUnit) -> np.ndarray:
    """float32 depths in `unit`, shaped like `codes` (integer 12-bit codes, any shape)."""
    return np.take(depth_table(coding, unit), codes)


def codes_from_depths(depths_m: np.ndarray, coding: DepthCoding) -> np.ndarray:
    """uint16 12-bit codes of float depths in metres (lerobot's `quantize_depth` for float input), for writers."""
    depths = np.asarray(depths_m, dtype=np.float32)
    low, high, shift = np.float32(coding.depth_min), np.float32(coding.depth_max), np.float32(coding.shift)
    if coding.use_log:
        log_low, log_high = math.log(float(low + shift)), math.log(float(high + shift))
        norm = (np.log(depths + shift) - log_low) / (log_high - log_low)
    else:
        norm = (depths - low) / (high - low)
    return np.rint(norm * (DEPTH_CODES - 1)).clip(0, DEPTH_CODES - 1).astype(np.uint16)
