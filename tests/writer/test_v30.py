import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from robostream.datasets.map_style import LeRobotDataset
from robostream.format.metadata import load_metadata
from robostream.synth import episode_tasks
from robostream.video.encode import count_frames
from robostream.writer.v30 import DatasetWriter


def _files_per_episode(meta, key):
    return [meta.video_file(int(e), key) for e in meta.episodes.episode_index]


def test_files_roll_over_independently_per_camera_and_for_data(av1_root):
    meta = load_metadata(av1_root)
    data_files = [meta.data_file(int(e)) for e in meta.episodes.episode_index]
    assert len(set(data_files)) >= 2
    per_camera = {k: _files_per_episode(meta, k) for k in meta.video_keys}
    for key, files in per_camera.items():
        assert len(set(files)) >= 2, f"{key} should span several mp4 files"
    cam0, cam1 = per_camera.values()
    rollovers = lambda files: [i for i in range(1, len(files)) if files[i] != files[i - 1]]  # noqa: E731
    assert rollovers(cam0) != rollovers(cam1), "cameras should roll over at different episodes"


def test_from_to_timestamps_match_the_mp4s(any_root):
    meta = load_metadata(any_root)
    for key in meta.video_keys:
        by_file: dict[str, list[int]] = {}
        for e in meta.episodes.episode_index:
            by_file.setdefault(meta.video_file(int(e), key), []).append(int(e))
        for relative, episodes in by_file.items():
            expected_from = 0.0
            for e in episodes:
                span = meta.episodes.video_span(e, key)
                length = int(meta.episodes.length[meta.episodes.row_of(e)])
                assert span.from_timestamp == pytest.approx(expected_from)
                assert span.to_timestamp - span.from_timestamp == pytest.approx(length / meta.fps)
                expected_from = span.to_timestamp
            frames = count_frames(meta.local(relative, "test"))
            assert frames == sum(int(meta.episodes.length[meta.episodes.row_of(e)]) for e in episodes)


def test_metadata_files_follow_lerobot_conventions(av1_root):
    tasks = pd.read_parquet(av1_root / "meta/tasks.parquet")
    assert tasks.index.name == "task" and list(tasks.columns) == ["task_index"]
    episodes = pq.read_table(next((av1_root / "meta/episodes").glob("chunk-*/file-*.parquet")))
    for column in (
        "episode_index",
        "tasks",
        "length",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
        "videos/observation.images.cam0/from_timestamp",
        "stats/action/mean",
        "stats/observation.images.cam0/std",
        "meta/episodes/file_index",
    ):
        assert column in episodes.column_names, column
    tasks_of_4 = episodes.column("tasks").to_pylist()[4]  # synth's episode 4 switches task half-way
    assert tasks_of_4 == list(dict.fromkeys(episode_tasks(4, 10))) and len(tasks_of_4) == 2
    stats = json.loads((av1_root / "meta/stats.json").read_text())
    assert np.asarray(stats["observation.images.cam0"]["mean"]).shape == (3, 1, 1)
    assert stats["action"]["count"] == [int(load_metadata(av1_root).episodes.length.sum())]
    data = pq.read_schema(next((av1_root / "data").glob("chunk-*/file-*.parquet")))
    action = data.field("action").type
    assert pa.types.is_fixed_size_list(action) and action.list_size == 6 and action.value_type == pa.float32()
    assert data.field("timestamp").type == pa.float32() and data.field("index").type == pa.int64()


def _features():
    return {
        "observation.state": {"dtype": "float32", "shape": [3], "names": None},
        "observation.images.wrist": {"dtype": "image", "shape": [48, 64, 3], "names": None},
        "observation.images.top": {"dtype": "video", "shape": [64, 64, 3], "names": None},
    }


def _episode(rng, length):
    return (
        {
            "observation.state": rng.normal(size=(length, 3)).astype(np.float32),
            "observation.images.wrist": rng.integers(0, 255, size=(length, 48, 64, 3), dtype=np.uint8),
        },
        {"observation.images.top": np.full((length, 64, 64, 3), 128, dtype=np.uint8)},
    )


def test_written_episodes_read_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, n) for n in (5, 3)]
    with DatasetWriter(tmp_path / "ds", fps=10, features=_features(), codec="h264", gop=10) as writer:
        for i, (frames, videos) in enumerate(episodes):
            writer.add_episode(
                frames, task=["a"] * 2 + ["b"] * (len(frames["observation.state"]) - 2) if i else "c", videos=videos
            )
    dataset = LeRobotDataset(root=tmp_path / "ds", return_uint8=True)
    assert len(dataset) == 8
    sample = dataset[6]  # episode 1, frame 1
    frames, _ = episodes[1]
    assert sample["task"] == "a" and dataset[7]["task"] == "b" and dataset[0]["task"] == "c"
    torch.testing.assert_close(sample["observation.state"], torch.from_numpy(frames["observation.state"][1]))
    torch.testing.assert_close(
        sample["observation.images.wrist"], torch.from_numpy(frames["observation.images.wrist"][1]).permute(2, 0, 1)
    )
    assert sample["observation.images.top"].shape == (3, 64, 64)


def test_interrupted_write_leaves_previous_dataset_intact(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "ds"
    with DatasetWriter(root, fps=10, features=_features(), codec="h264") as writer:
        writer.add_episode(*_episode(rng, 4)[:1], task="t", videos=_episode(rng, 4)[1])
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(RuntimeError, match="crash"):
        with DatasetWriter(root, fps=10, features=_features(), codec="h264", overwrite=True) as writer:
            writer.add_episode(*_episode(rng, 6)[:1], task="t", videos=_episode(rng, 6)[1])
            raise RuntimeError("crash in the middle of a write")
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_writer_refuses_existing_root_and_bad_frames(tmp_path):
    (tmp_path / "ds").mkdir()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter(tmp_path / "ds", fps=10, features=_features())
    writer = DatasetWriter(tmp_path / "new", fps=10, features=_features(), codec="h264")
    frames, videos = _episode(np.random.default_rng(2), 3)
    with pytest.raises(ValueError, match="observation.images.top"):
        writer.add_episode(
            frames, task="t", videos={"observation.images.top": videos["observation.images.top"][:, :32]}
        )
    writer.abort()
    assert not (tmp_path / "new").exists()
