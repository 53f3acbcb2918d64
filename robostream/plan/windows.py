"""`delta_timestamps` windows: offsets in frames, the clamped query indices and the `<key>_is_pad` masks.

Pure functions (numpy in, numpy out) shared by the map-style and the streaming datasets, so both give the same
windows. Semantics are lerobot's: query = clamp(i + offset, from, to - 1); a clamped query repeats the edge frame
and is marked as padding. Any width is allowed (there is no 100-frame limit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from robostream.numbers import finite_number


def window_seconds(delta_timestamps: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """`delta_timestamps` as lists of finite seconds, or an error naming the key and position: a NaN, inf or null
    offset would become a fully padded window, a scalar or a string is a mistyped window."""
    out: dict[str, list[float]] = {}
    for key, deltas in delta_timestamps.items():
        if isinstance(deltas, (str, bytes)) or not isinstance(deltas, Sequence | np.ndarray) or len(deltas) == 0:
            raise ValueError(f"delta_timestamps[{key!r}] must be a non-empty list of seconds, got {deltas!r}")
        out[key] = [float(finite_number(d, what=f"delta_timestamps[{key!r}][{i}]")) for i, d in enumerate(deltas)]
    return out


def delta_offsets(
    delta_timestamps: Mapping[str, Sequence[float]], fps: float, tolerance_s: float, features: Sequence[str]
) -> dict[str, np.ndarray]:
    """Validate deltas (known keys, finite multiples of 1/fps within tolerance) and convert them to frame
    offsets."""
    finite_number(tolerance_s, what="tolerance_s", minimum=0)
    offsets: dict[str, np.ndarray] = {}
    for key, seconds in window_seconds(delta_timestamps).items():
        if key not in features:
            raise ValueError(
                f"delta_timestamps key {key!r} is not a feature of the dataset; features: {list(features)}"
            )
        values = np.asarray(seconds, dtype=np.float64)
        frames = np.rint(values * fps)
        off = np.abs(values - frames / fps)
        bad = np.nonzero(off > tolerance_s)[0]
        if len(bad):
            d = float(values[bad[0]])
            raise ValueError(
                f"delta_timestamps[{key!r}] value {d} is not a multiple of 1/fps = {1 / fps:.6f}s within "
                f"tolerance_s={tolerance_s} (off by {off[bad[0]]:.6f}s); use multiples of 1/{fps}"
            )
        offsets[key] = frames.astype(np.int64)
    return offsets


def window_indices(
    index: int | np.ndarray, episode_from: int | np.ndarray, episode_to: int | np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Indices to read for a window around `index` in episode [from, to), and which are padding.

    Works in any index space (global, or frame within the episode with from=0) and broadcasts: an (N, 1) array of
    indices with (1, T) offsets gives (N, T) windows.
    """
    query = index + offsets
    is_pad = (query < episode_from) | (query >= episode_to)
    return np.clip(query, episode_from, episode_to - 1), is_pad
