"""Per-episode feature statistics and their aggregation into `meta/stats.json`.

Aggregation follows lerobot: count-weighted mean, the parallel (Chan et al.) formula for the variance, element-wise
min/max, summed counts. Quantiles cannot be merged exactly from summaries; like lerobot they are averaged with count
weights, which is exact for identical distributions and an approximation otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robostream.errors import DatasetFormatError

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Stats over axis 0 of a (N, ...) array of one episode's values."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)], dtype=np.int64),
    }
    for name, q in QUANTILES.items():
        stats[name] = np.quantile(values, q, axis=0)
    return stats


def image_stats(frames_thwc: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 frames (T, H, W, C), scaled to [0, 1] and shaped (C, 1, 1) like lerobot's."""
    return frame_stats(frames_thwc, divisor=255.0)


def frame_stats(frames_thwc: np.ndarray, *, divisor: float = 1.0) -> dict[str, np.ndarray]:
    """Per-channel stats of frames (T, H, W, C) divided by `divisor` (depth maps: in their own unit, not divided
    by 255, as lerobot's), shaped (C, 1, 1) like lerobot's image stats; count is T."""
    t, h, w, c = frames_thwc.shape
    pixels = np.asarray(frames_thwc).reshape(-1, c).astype(np.float64) / divisor
    stats = feature_stats(pixels)
    out = {k: v.reshape(c, 1, 1) for k, v in stats.items() if k != "count"}
    out["count"] = np.array([t], dtype=np.int64)
    return out


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Combine per-episode stats of every feature into dataset stats, in one pass in episode order."""
    features = sorted({f for ep in per_episode for f in ep})
    stacked = {}
    for feat in features:
        parts = [ep[feat] for ep in per_episode if feat in ep]
        stacked[feat] = {k: np.stack([p[k] for p in parts]) for k in parts[0] if all(k in p for p in parts)}
    return aggregate_stacked(stacked)


def aggregate_stacked(stacked: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Dataset stats from per-episode stats stacked along axis 0 ({feature: {stat: (episodes, ...)}}).

    The arithmetic is lerobot's own (`compute_stats.aggregate_feature_stats`, 0.4-0.6) operation for operation,
    so a converted dataset's stats.json equals lerobot's to the last bit, not just within rounding.
    """
    result: dict[str, dict[str, np.ndarray]] = {}
    for feat, stats in stacked.items():
        means, counts = stats["mean"], stats["count"]
        variances = stats["std"] ** 2
        total_count = counts.sum(axis=0)
        while counts.ndim < means.ndim:  # (N, 1) -> (N, 1, ...) to broadcast against the means
            counts = np.expand_dims(counts, axis=-1)
        total_mean = (means * counts).sum(axis=0) / total_count
        total_variance = ((variances + (means - total_mean) ** 2) * counts).sum(axis=0) / total_count
        agg = {
            "min": np.min(stats["min"], axis=0),
            "max": np.max(stats["max"], axis=0),
            "mean": total_mean,
            "std": np.sqrt(total_variance),
            "count": total_count,
        }
        for q in (k for k in stats if k.startswith("q") and k[1:].isdigit()):
            agg[q] = (stats[q] * counts).sum(axis=0) / total_count
        result[feat] = agg
    return result


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {f: {k: np.asarray(v).tolist() for k, v in s.items()} for f, s in stats.items()}


def stats_from_json(doc: Any, name: str) -> dict[str, dict[str, np.ndarray]]:
    """stats.json ({feature: {stat: number or nested list}}) as arrays; `name` (the file) is named in errors."""
    if not isinstance(doc, dict) or not all(isinstance(s, dict) for s in doc.values()):
        raise DatasetFormatError(
            f"{name}: expected an object of features, each an object of stats; re-write it "
            "or delete it (stats are optional)"
        )
    return {f: {k: np.asarray(v) for k, v in s.items()} for f, s in doc.items()}
