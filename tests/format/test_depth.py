"""Depth cameras in info.json and their codes -> depths table (format/depth.py).

Bit-equality with lerobot's own dequantisation is tested in lerobot's environment (tests/compat/test_depth_compat.py);
here: the marker's spellings, the refusals, the stats rescale and the table's properties.
"""

import math

import numpy as np
import pytest

from robostream.errors import DatasetFormatError
from robostream.format.depth import (
    DepthCoding,
    codes_from_depths,
    depth_coding,
    depth_table,
    depths_from_codes,
    is_depth_feature,
    rescale_depth_stats,
)
from robostream.format.info import parse_info

PARAMS = {"video.depth_min": 0.01, "video.depth_max": 10.0, "video.shift": 3.5, "video.use_log": True}
LEROBOT_FEATURE = {
    "dtype": "video",
    "shape": [64, 64, 1],
    "names": ["height", "width", "channels"],
    "info": {"is_depth_map": True, "depth_unit": "m", "video.codec": "hevc", "video.pix_fmt": "gray12le", **PARAMS},
}


def info_with(feature: dict) -> dict:
    return {"codebase_version": "v3.0", "fps": 10, "features": {"observation.images.depth": feature}}


@pytest.mark.parametrize(
    "feature",
    [
        LEROBOT_FEATURE,
        {"dtype": "video", "shape": [8, 8, 1], "info": {"video.is_depth_map": True, **PARAMS}},  # v2.1 spelling
        {"dtype": "video", "shape": [8, 8, 1], "video_info": {"video.is_depth_map": True, **PARAMS}},  # older block
    ],
)
def test_every_spelling_of_the_marker_makes_a_depth_camera(feature):
    info = parse_info(info_with(feature), "meta/info.json")
    assert list(info.depth_codings) == ["observation.images.depth"]
    assert info.depth_codings["observation.images.depth"] == DepthCoding(
        0.01, 10.0, 3.5, True, "m" if "info" in feature and "depth_unit" in feature["info"] else None
    )


def test_a_video_info_block_gives_its_own_parameters_not_lerobots_defaults():
    """lerobot reads the parameters from `info` only: a `video_info` block's 0.5..5 m would decode as 0.01..10."""
    feature = {
        "dtype": "video",
        "shape": [8, 8, 1],
        "info": {"video.is_depth_map": False},
        "video_info": {
            "video.is_depth_map": True,
            "video.depth_min": 0.5,
            "video.depth_max": 5.0,
            "video.shift": 1.0,
            "video.use_log": False,
        },
    }
    assert depth_coding(feature, key="d", source="x") == DepthCoding(0.5, 5.0, 1.0, False, None)


def test_a_false_marker_is_an_rgb_camera():
    feature = {"dtype": "video", "shape": [8, 8, 3], "info": {"video.is_depth_map": False}}
    assert not is_depth_feature(feature)
    assert parse_info(info_with(feature), "meta/info.json").depth_codings == {}


@pytest.mark.parametrize(
    "change, named",
    [
        ({"video.depth_min": None}, "video.depth_min"),
        ({"video.shift": float("nan")}, "video.shift"),
        ({"video.depth_max": "10"}, "video.depth_max"),
        ({"video.use_log": "yes"}, "video.use_log"),
        ({"video.depth_min": 20.0}, "not below"),
        ({"video.shift": -1.0}, "depth_min + video.shift"),
        ({"depth_unit": "cm"}, "depth_unit"),
    ],
)
def test_bad_quantisation_is_refused_naming_the_key_and_value(change, named):
    info = {**LEROBOT_FEATURE["info"], **change}
    info = {k: v for k, v in info.items() if v is not None}
    with pytest.raises(DatasetFormatError, match="observation.images.depth") as failure:
        parse_info(info_with({**LEROBOT_FEATURE, "info": info}), "meta/info.json")
    assert named in str(failure.value)


def test_a_depth_map_stored_as_images_is_refused_clearly():
    with pytest.raises(DatasetFormatError, match="stored as 'image'"):
        parse_info(info_with({**LEROBOT_FEATURE, "dtype": "image"}), "meta/info.json")


def test_stats_are_rescaled_from_their_recorded_unit_like_lerobot():
    stats = {
        "observation.images.depth": {"min": np.array([0.0]), "max": np.array([50.0]), "count": np.array([60])},
        "observation.state": {"min": np.array([1.0])},
    }
    metres = DepthCoding(0.01, 10.0, 3.5, True, "m")
    mm = rescale_depth_stats(stats, {"observation.images.depth": metres}, "mm")
    assert mm["observation.images.depth"]["max"].tolist() == [50000.0]
    assert mm["observation.images.depth"]["count"].tolist() == [60]  # count is not a depth
    assert mm["observation.state"] == stats["observation.state"]
    assert stats["observation.images.depth"]["max"].tolist() == [50.0]  # not edited in place
    assert rescale_depth_stats(stats, {"observation.images.depth": metres}, "m") == stats
    unknown = DepthCoding(0.01, 10.0, 3.5, True, None)  # no depth_unit recorded: left as it is (lerobot warns)
    assert rescale_depth_stats(stats, {"observation.images.depth": unknown}, "mm") == stats


@pytest.mark.parametrize("use_log", [True, False])
def test_the_table_inverts_lerobots_quantisation_and_spans_the_range(use_log):
    coding = DepthCoding(0.01, 10.0, 3.5, use_log, "m")
    metres, mm = depth_table(coding, "m"), depth_table(coding, "mm")
    assert metres.dtype == np.float32 and len(metres) == 4096
    assert np.all(np.diff(metres) > 0)  # one depth per code, increasing
    # float32 exp, then minus the 3.5 m shift: code 0 is 0.010000229 m (lerobot's too)
    assert math.isclose(metres[0], 0.01, abs_tol=1e-6) and math.isclose(metres[-1], 10.0, abs_tol=1e-6)
    assert np.array_equal(codes_from_depths(metres, coding), np.arange(4096))  # every code round-trips
    assert np.array_equal(mm, np.round(metres * np.float32(1000.0)))  # whole millimetres
    codes = np.array([[[[0, 4095], [17, 2048]]]], dtype=np.int16)
    depths = depths_from_codes(codes, coding, "mm")
    assert depths.dtype == np.float32 and depths.shape == (1, 1, 2, 2)
    assert depths.flatten().tolist() == [mm[0], mm[4095], mm[17], mm[2048]]


def test_depths_outside_the_range_clamp_to_the_end_codes():
    coding = DepthCoding(0.01, 10.0, 3.5, True, "m")
    assert codes_from_depths(np.array([0.0, 50.0]), coding).tolist() == [0, 4095]
