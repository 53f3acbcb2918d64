import numpy as np

from robostream.format.stats import aggregate_stats, feature_stats, image_stats


def test_aggregation_equals_stats_of_the_concatenation():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=i, scale=1 + i, size=(n, 3)) for i, n in enumerate([5, 40, 17])]
    agg = aggregate_stats([{"x": feature_stats(p)} for p in parts])["x"]
    everything = np.concatenate(parts)
    np.testing.assert_allclose(agg["mean"], everything.mean(0))
    np.testing.assert_allclose(agg["std"], everything.std(0))
    np.testing.assert_allclose(agg["min"], everything.min(0))
    np.testing.assert_allclose(agg["max"], everything.max(0))
    assert agg["count"].tolist() == [62]


def test_image_stats_are_per_channel_in_unit_range():
    frames = np.zeros((4, 8, 8, 3), dtype=np.uint8)
    frames[..., 0] = 255
    stats = image_stats(frames)
    assert stats["mean"].shape == (3, 1, 1)
    np.testing.assert_allclose(stats["mean"].ravel(), [1.0, 0.0, 0.0])
    assert stats["count"].tolist() == [4]
