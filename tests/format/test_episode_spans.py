"""Episode video spans within one camera file never overlap (issue 32, defect 9), whatever the row order."""

from __future__ import annotations

import numpy as np
import pytest

from robostream.errors import DatasetFormatError
from robostream.format.episodes import check_spans_apart

VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
FPS = 10.0


def check(chunk, file, from_ts, to_ts) -> None:
    check_spans_apart(
        "meta/episodes/chunk-000/file-000.parquet",
        "cam",
        VIDEO_PATH,
        np.arange(len(chunk)),
        np.array(chunk),
        np.array(file),
        np.array(from_ts),
        np.array(to_ts),
        FPS,
    )


def test_spans_that_touch_or_lie_in_other_files_pass_in_any_row_order():
    # episodes 0 and 2 share file 1, 1 and 3 file 0; rows are not in file order; 2 starts 0.4 frame before 0 ends
    check([0, 0, 0, 0], [1, 0, 1, 0], [0.0, 1.0, 1.96, 0.0], [2.0, 2.0, 3.0, 1.0])


def test_an_overlap_is_found_when_the_rows_are_not_in_file_order():
    with pytest.raises(
        DatasetFormatError,
        match=r"camera 'cam': in videos/cam/chunk-000/file-001.mp4 the video spans "
        r"of episode 0 \[0.0, 2.0\) s and episode 2 \[1.9, 3.0\) s overlap "
        r"\(1 overlapping pair\(s\)\)",
    ):
        check([0, 0, 0, 0], [1, 0, 1, 0], [0.0, 1.0, 1.9, 0.0], [2.0, 2.0, 3.0, 1.0])


def test_files_are_told_apart_by_chunk_too():
    check([0, 1], [0, 0], [0.0, 0.5], [1.0, 1.5])
    with pytest.raises(DatasetFormatError, match="file-000.mp4 the video spans of episode 0"):
        check([1, 1], [0, 0], [0.0, 0.5], [1.0, 1.5])
