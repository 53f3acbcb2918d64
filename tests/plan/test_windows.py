import numpy as np
import pytest

from robostream.plan.windows import delta_offsets, window_indices


def test_offsets_from_seconds():
    offsets = delta_offsets({"a": [-0.1, 0, 0.05, 10.0]}, fps=20, tolerance_s=1e-4, features=["a"])
    assert offsets["a"].tolist() == [-2, 0, 1, 200]


def test_off_grid_delta_and_unknown_key_are_named():
    with pytest.raises(ValueError, match=r"delta_timestamps\['a'\] value 0.03"):
        delta_offsets({"a": [0, 0.03]}, fps=20, tolerance_s=1e-4, features=["a"])
    with pytest.raises(ValueError, match="'b' is not a feature"):
        delta_offsets({"b": [0]}, fps=20, tolerance_s=1e-4, features=["a"])
    assert delta_offsets({"a": [0.0502]}, fps=20, tolerance_s=1e-3, features=["a"])["a"].tolist() == [1]


def test_window_clamps_to_the_episode_and_marks_padding():
    query, pad = window_indices(101, 100, 105, np.array([-3, -1, 0, 2, 4, 5]))
    assert query.tolist() == [100, 100, 101, 103, 104, 104]
    assert pad.tolist() == [True, False, False, False, True, True]


def test_windows_wider_than_100_frames_are_exact():
    offsets = np.arange(-150, 151)
    query, pad = window_indices(1000, 900, 1200, offsets)
    expected = np.clip(1000 + offsets, 900, 1199)
    assert query.tolist() == expected.tolist()
    assert pad[:50].all() and not pad[50:].any()
