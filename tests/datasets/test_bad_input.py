"""Bad datasets fail with a clear error naming the file, never a hang or a wrong frame."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.errors import (
    DatasetFormatError,
    FrameToleranceError,
    MissingFileError,
    UnsafePathError,
    UnsupportedVersionError,
)
from robostream.format.metadata import load_metadata
from tests.helpers import copy_tree


@pytest.fixture()
def broken(av1_root, tmp_path):
    return copy_tree(av1_root, tmp_path / "ds")


def _edit_info(root, **changes):
    path = root / "meta/info.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def test_missing_info_json(broken):
    (broken / "meta/info.json").unlink()
    with pytest.raises(DatasetFormatError, match=r"meta/info.json: not found"):
        LeRobotDataset(root=broken)


def test_malformed_info_json(broken):
    (broken / "meta/info.json").write_text('{"codebase_version": "v3.0", "fps": 20,')
    with pytest.raises(DatasetFormatError, match=r"info.json: malformed JSON at line 1"):
        LeRobotDataset(root=broken)


def test_v21_root_points_to_conversion(tmp_path):
    root = tmp_path / "old"
    (root / "meta").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 30, "features": {}}))
    (root / "meta/episodes.jsonl").write_text('{"episode_index": 0, "tasks": ["x"], "length": 3}\n')
    with pytest.raises(UnsupportedVersionError, match=r"info.json: codebase_version 'v2.1'.*convert"):
        LeRobotDataset(root=root)
    (root / "meta/info.json").unlink()
    with pytest.raises(UnsupportedVersionError, match="v2.x dataset .*convert"):
        LeRobotDataset(root=root)


def test_missing_mp4_names_file_episode_and_camera(broken):
    meta = load_metadata(broken)
    key = meta.video_keys[1]
    victim = meta.local(meta.video_file(3, key), "t")
    victim.unlink()
    dataset = LeRobotDataset(root=broken)
    position = int(meta.episodes.from_index[3])
    with pytest.raises(MissingFileError) as err:
        dataset[position]
    assert str(victim) in str(err.value) and "episode 3" in str(err.value) and key in str(err.value)


def test_timestamp_outside_tolerance_names_file_and_time(broken):
    meta = load_metadata(broken)
    path = next((broken / "meta/episodes").glob("*/*.parquet"))
    table = pq.read_table(path)
    column = f"videos/{meta.video_keys[0]}/from_timestamp"
    shifted = pa.array([v + 0.02 for v in table.column(column).to_pylist()], type=pa.float64())
    pq.write_table(table.set_column(table.column_names.index(column), column, shifted), path)
    dataset = LeRobotDataset(root=broken)
    with pytest.raises(
        FrameToleranceError, match=r"\.mp4 \(episode 0, camera .*\): no frame within tolerance_s=0.0001"
    ):
        dataset[0]


def test_paths_escaping_the_root_are_refused(broken):
    _edit_info(broken, data_path="../../outside/{chunk_index}/{file_index}.parquet")
    with pytest.raises(UnsafePathError, match="data_path"):
        LeRobotDataset(root=broken)
    _edit_info(broken, data_path="/etc/{chunk_index}{file_index}.parquet")
    with pytest.raises(UnsafePathError, match="absolute"):
        LeRobotDataset(root=broken)


def _episodes_of(path):
    return sorted(set(pq.read_table(path, columns=["episode_index"]).column("episode_index").to_pylist()))


def _first_position(meta, episode):
    return int(meta.episodes.from_index[meta.episodes.row_of(episode)])


def test_missing_rows_fail_when_the_episode_is_read(broken):
    """Construction reads no data file; the damaged episode fails (naming file, episode and index range) when a
    sample needs it, in both datasets, and the other episodes still read."""
    meta = load_metadata(broken)
    data = meta.local(meta.data_file(0), "t")
    table = pq.read_table(data)
    pq.write_table(table.slice(0, table.num_rows - 1), data)
    victim = _episodes_of(data)[-1]
    lo, hi = _first_position(meta, victim), int(meta.episodes.to_index[meta.episodes.row_of(victim)])
    message = (
        rf"file-000.parquet: episode {victim} has {hi - lo - 1} rows with index {lo}..{hi - 2}, but the "
        rf"episode table says index \[{lo}, {hi}\)"
    )
    dataset = LeRobotDataset(root=broken)
    assert int(dataset[0]["index"]) == 0
    with pytest.raises(DatasetFormatError, match=message):
        dataset[lo]
    with pytest.raises(DatasetFormatError, match=message):
        list(StreamingLeRobotDataset(root=broken, seed=1))


def test_rows_out_of_order_are_never_yielded(broken):
    meta = load_metadata(broken)
    data = meta.local(meta.data_file(0), "t")
    table = pq.read_table(data)
    victim = _episodes_of(data)[0]
    mine = [i for i, e in enumerate(table.column("episode_index").to_pylist()) if e == victim]
    order = list(range(table.num_rows))
    order[mine[3]], order[mine[4]] = order[mine[4]], order[mine[3]]
    pq.write_table(table.take(order), data)
    with pytest.raises(DatasetFormatError, match=rf"episode {victim} has .* rows with index .*, out of order"):
        LeRobotDataset(root=broken)[_first_position(meta, victim)]
    with pytest.raises(DatasetFormatError, match=rf"file-000.parquet: episode {victim} has"):
        list(StreamingLeRobotDataset(root=broken, episodes=[victim]))


def test_missing_data_file_names_the_file_and_episode(broken):
    meta = load_metadata(broken)
    data = meta.local(meta.data_file(0), "t")
    data.unlink()
    dataset = LeRobotDataset(root=broken)  # nothing under data/ is read at construction
    with pytest.raises(MissingFileError, match=r"file-000.parquet: data file of episode 0"):
        dataset[0]


def test_root_that_is_not_a_dataset(tmp_path):
    with pytest.raises(DatasetFormatError, match="does not exist"):
        LeRobotDataset(root=tmp_path / "nowhere")
    shutil.os.makedirs(tmp_path / "empty")
    with pytest.raises(DatasetFormatError, match="meta/info.json"):
        LeRobotDataset(root=tmp_path / "empty")
