"""lerobot's cut points and timestamps, as pure functions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.convert.plan import FileSpan, cut_files, file_tasks, next_file, video_timestamps


def test_a_file_closes_before_the_episode_that_would_reach_the_limit():
    # 4 + 5 = 9 < 10 stays; 9 + 1 = 10 >= 10 closes (lerobot: current + next >= limit)
    assert cut_files([4.0, 5.0, 1.0, 3.0], 10.0) == [FileSpan(0, 0, 0, 2), FileSpan(0, 1, 2, 4)]


def test_an_episode_larger_than_the_limit_gets_a_file_of_its_own_and_no_file_is_empty():
    assert cut_files([30.0, 1.0, 50.0], 10.0) == [FileSpan(0, 0, 0, 1), FileSpan(0, 1, 1, 2), FileSpan(0, 2, 2, 3)]
    assert cut_files([], 10.0) == []


def test_file_indices_roll_into_the_next_chunk_after_1000_files():
    assert next_file(0, 998) == (0, 999)
    assert next_file(0, 999) == (1, 0)
    spans = cut_files([1.0] * 1002, 1.0)  # one episode per file
    assert (spans[999].chunk_index, spans[999].file_index) == (0, 999)
    assert (spans[1000].chunk_index, spans[1000].file_index, spans[1001].file_index) == (1, 0, 1)


def test_timestamps_are_running_sums_that_restart_in_each_file():
    spans = [FileSpan(0, 0, 0, 2), FileSpan(0, 1, 2, 3)]
    assert video_timestamps([0.1, 0.2, 0.3], spans) == [(0.0, 0.1), (0.1, 0.1 + 0.2), (0.0, 0.3)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=5.0), max_size=60), st.floats(min_value=0.01, max_value=8.0))
def test_spans_partition_the_episodes_in_order_and_match_a_direct_replay(sizes, limit):
    spans = cut_files(sizes, limit)
    assert [e for s in spans for e in range(s.first, s.end)] == list(range(len(sizes)))
    assert all(s.end > s.first for s in spans)
    # replay lerobot's loop literally: the file index an episode gets
    expected, file_index, size, count = [], 0, 0, 0
    for episode_mb in sizes:
        if size + episode_mb >= limit and count > 0:
            file_index, size, count = file_index + 1, 0, 0
        expected.append(file_index)
        size += episode_mb
        count += 1
    assert [s.file_index for s in spans for _ in range(s.first, s.end)] == expected


def test_tasks_are_data_files_then_each_camera_sorted_with_unique_ids():
    tasks = file_tasks([1.0, 1.0], {"b": [1.0, 1.0], "a": [3.0, 3.0]}, data_limit_mb=10, video_limit_mb=4)
    assert [(t.kind, t.video_key, t.output) for t in tasks] == [
        ("data", None, "data/chunk-000/file-000.parquet"),
        ("video", "a", "videos/a/chunk-000/file-000.mp4"),
        ("video", "a", "videos/a/chunk-000/file-001.mp4"),
        ("video", "b", "videos/b/chunk-000/file-000.mp4"),
    ]
    assert len({t.task_id for t in tasks}) == len(tasks)
