"""A mixture's sources file (datasets/sources_file.py): JSON or YAML, every error naming the file and the source."""

import json

import pytest

from robostream.datasets.mixture import Source
from robostream.datasets.sources_file import parse_source_arguments, source_arguments, sources_from_file
from robostream.storage.options import ReadOptions

SOURCES = [
    {"root": "/data/a", "proportion": 0.7, "episodes": [0, 2]},
    {"repo_id": "owner/b", "proportion": 0.3, "read_options": {"read_buffer": "64mb"}},
]
YAML = """
- root: /data/a
  proportion: 0.7
  episodes: [0, 2]
- repo_id: owner/b
  proportion: 0.3
  read_options:
    read_buffer: 64mb
"""


def test_json_and_yaml_files_give_the_same_sources(tmp_path):
    (tmp_path / "mix.json").write_text(json.dumps(SOURCES))
    (tmp_path / "mix.yaml").write_text(YAML)
    assert source_arguments(tmp_path / "mix.json") == source_arguments(tmp_path / "mix.yaml") == SOURCES
    for name in ("mix.json", "mix.yaml"):
        first, second = sources_from_file(tmp_path / name)
        assert first == Source(root="/data/a", proportion=0.7, episodes=[0, 2])
        assert second.read_options == ReadOptions(read_buffer="64mb") and second.proportion == 0.3


def test_a_bad_source_is_named_with_its_file(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text("- root: /data/a\n  proportion: 1\n- root: /data/b\n  proportion: 1\n  cache_size: 3\n")
    with pytest.raises(ValueError, match=rf"{path}: source 1 {{'root': '/data/b'.*'cache_size'"):
        source_arguments(path)
    path.write_text('[{"root": "/data/a", "read_options": {"cache_size": "1gb"}}]')
    with pytest.raises(ValueError, match=r"mix.yaml: source 0 .*unknown keys \['cache_size'\]"):
        sources_from_file(path)
    path.write_text("- root: /data/a\n- just a string\n")
    with pytest.raises(ValueError, match=r"mix.yaml: source 1 is 'just a string', not an object of Source arguments"):
        source_arguments(path)


def test_a_file_that_is_not_a_list_of_sources_is_named(tmp_path):
    path = tmp_path / "mix.json"
    path.write_text('{"root": "/data/a"}')
    with pytest.raises(ValueError, match=rf"{path}: expected a non-empty list of Source arguments"):
        source_arguments(path)
    path.write_text("[{'root': 1}]")  # not JSON (single quotes)
    with pytest.raises(ValueError, match=rf"{path}: not a JSON list of Source arguments"):
        source_arguments(path)
    (tmp_path / "bad.yml").write_text("- [unclosed\n")
    with pytest.raises(ValueError, match=r"bad.yml: not a YAML list of Source arguments"):
        source_arguments(tmp_path / "bad.yml")
    with pytest.raises(ValueError, match=r"missing.json: cannot read the sources file"):
        source_arguments(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"--sources: expected a non-empty list of Source arguments"):
        parse_source_arguments("[]", where="--sources", syntax="json")
