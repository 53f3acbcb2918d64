import json
import re

import pytest

from robostream.errors import DatasetFormatError, UnsupportedVersionError
from robostream.format.info import chunks_size_of, loads_info, parse_info

BASE = {
    "codebase_version": "v3.0",
    "fps": 30,
    "total_episodes": 2,
    "total_frames": 10,
    "total_tasks": 1,
    "features": {
        "action": {"dtype": "float32", "shape": [2], "names": None},
        "observation.images.top": {"dtype": "video", "shape": [48, 64, 3], "names": None},
    },
}


def test_unknown_and_v2_keys_are_ignored_and_defaults_filled():
    doc = dict(BASE, total_videos=4, total_chunks=1, some_future_key={"x": 1}, video_files_size_in_mb=500)
    info = parse_info(doc, "meta/info.json")
    assert info.video_keys == ["observation.images.top"]
    assert info.video_files_size_in_mb == 500
    assert info.data_files_size_in_mb == 100
    assert info.video_path.startswith("videos/{video_key}")
    assert info.to_json_dict()["some_future_key"] == {"x": 1}


def test_video_path_null_is_fine_without_video():
    doc = dict(BASE, video_path=None, features={"action": BASE["features"]["action"]})
    assert parse_info(doc, "info.json").video_path is None


def test_v21_points_to_conversion():
    with pytest.raises(UnsupportedVersionError, match="convert"):
        parse_info(dict(BASE, codebase_version="v2.1"), "x/meta/info.json")


def test_malformed_json_names_file_and_line():
    text = json.dumps(BASE, indent=1)[:-5]
    with pytest.raises(DatasetFormatError, match=r"x/meta/info.json: malformed JSON at line \d+"):
        loads_info(text, "x/meta/info.json")


@pytest.mark.parametrize("key", ["fps", "features"])
def test_missing_required_key_is_named(key):
    doc = {k: v for k, v in BASE.items() if k != key}
    with pytest.raises(DatasetFormatError, match=repr(key)):
        parse_info(doc, "info.json")


LANGUAGE_FEATURES = {
    "language_persistent": {"dtype": "language", "shape": [1], "names": None},
    "language_events": {"dtype": "language", "shape": [1], "names": None},
}


def test_language_columns_are_accepted_and_tools_kept():
    tools = [{"type": "function", "function": {"name": "say"}}]
    info = parse_info(dict(BASE, features={**BASE["features"], **LANGUAGE_FEATURES}, tools=tools), "info.json")
    assert info.features["language_events"]["dtype"] == "language"
    assert info.to_json_dict()["tools"] == tools


def test_unknown_dtype_is_refused_by_name():
    features = {**BASE["features"], "sound": {"dtype": "audio", "shape": [1], "names": None}}
    with pytest.raises(
        DatasetFormatError,
        match=r"info.json: feature 'sound' has dtype 'audio', neither a numeric "
        r"dtype nor one of \('video', 'image', 'string', 'language'\)",
    ):
        parse_info(dict(BASE, features=features), "info.json")


def test_language_dtype_under_another_name_is_refused():
    features = {**BASE["features"], "notes": {"dtype": "language", "shape": [1], "names": None}}
    with pytest.raises(DatasetFormatError, match="feature 'notes' has dtype 'language', which lerobot reads only as"):
        parse_info(dict(BASE, features=features), "info.json")


@pytest.mark.parametrize("chunks_size", [1, 2, 1000, "missing", 2.0, 0, -3, "10", True, None])
def test_chunks_size_alone_agrees_with_the_whole_parse(chunks_size):
    """What probing the episodes files of a plain-HTTP source reads (chunks_size_of) is what loads_info reads, and a
    value it refuses is refused with loads_info's error."""
    doc = dict(BASE) if chunks_size == "missing" else dict(BASE, chunks_size=chunks_size)
    text = json.dumps(doc)
    try:
        expected = loads_info(text, "x/meta/info.json").chunks_size
    except DatasetFormatError as exc:
        with pytest.raises(DatasetFormatError, match=re.escape(str(exc))):
            chunks_size_of(text, "x/meta/info.json")
        return
    assert chunks_size_of(text, "x/meta/info.json") == expected


def test_chunks_size_alone_of_malformed_json_names_file_and_line():
    with pytest.raises(DatasetFormatError, match=r"x/meta/info.json: malformed JSON at line \d+"):
        chunks_size_of(json.dumps(BASE)[:-5], "x/meta/info.json")
