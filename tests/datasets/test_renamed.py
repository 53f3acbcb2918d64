"""Renamed public names keep working for one release, with a FutureWarning naming the new one (issue 22: "source"
named nine things; now a Source is a dataset of a mixture, ReadOptions how bytes are read, `frames` the reader)."""

from __future__ import annotations

import pytest

import robostream
from robostream import LeRobotDataset, ReadOptions, Source, StreamingLeRobotDataset


def test_source_options_is_read_options_with_a_warning():
    with pytest.warns(FutureWarning, match="SourceOptions is now called ReadOptions"):
        old = robostream.SourceOptions(read_buffer="64mb")
    assert isinstance(old, ReadOptions) and old.read_buffer == "64mb"


def test_source_argument_is_read_options_with_a_warning(av1_root):
    options = ReadOptions(read_buffer="64mb")
    with pytest.warns(FutureWarning, match="source= is now called read_options="):
        streaming = StreamingLeRobotDataset(root=av1_root, source=options)
    assert streaming.meta.data_storage.block_budget == 64_000_000
    with pytest.warns(FutureWarning, match="source= is now called read_options="):
        mapped = LeRobotDataset(root=av1_root, source=options)
    assert mapped.meta.data_storage.block_budget == 64_000_000
    with pytest.raises(TypeError, match="pass read_options= only"):
        StreamingLeRobotDataset(root=av1_root, source=options, read_options=options)


def test_source_options_field_and_frames_property(av1_root):
    options = ReadOptions(read_buffer="64mb")
    with pytest.warns(FutureWarning, match="options= is now called read_options="):
        spec = Source(root=av1_root, options=options)
    assert spec.read_options is options and spec.options is None
    dataset = StreamingLeRobotDataset(root=av1_root)
    with pytest.warns(FutureWarning, match=r"\.source is now called \.frames"):
        assert dataset.source is dataset.frames
