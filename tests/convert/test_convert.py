"""Conversion output: the same for any number of workers and executors, loadable, equal to its v2.1 input."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.convert.verify import verify
from robostream.datasets.map_style import LeRobotDataset
from robostream.format.v21 import read_v21
from robostream.synth import read_marker
from tests.helpers import DATA_MB, VIDEO_MB, copy_tree, tree_listing


def quiet(line: str) -> None:
    pass


def test_reference_has_several_files_per_camera_rolling_over_at_different_episodes(reference: Path):
    episodes = pq.read_table(next((reference / "meta/episodes").rglob("*.parquet"))).to_pydict()
    data_files = set(episodes["data/file_index"])
    cam0 = episodes["videos/observation.images.cam0/file_index"]
    cam1 = episodes["videos/observation.images.cam1/file_index"]
    assert len(data_files) >= 2 and len(set(cam0)) >= 2 and len(set(cam1)) >= 2
    assert cam0 != cam1


def test_two_workers_write_what_one_worker_writes(v21_root: Path, reference: Path, tmp_path: Path):
    summary = convert(
        v21_root,
        out=tmp_path / "out",
        workers=2,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=quiet,
    )
    assert compare_datasets(tmp_path / "out", reference) == []
    assert summary["files"] == len(list((tmp_path / "out").rglob("*.mp4"))) + len(
        list((tmp_path / "out/data").rglob("*.parquet"))
    )
    assert summary["bytes_written"] > 0 and summary["files_resumed"] == 0
    assert not (tmp_path / ".out.robostream-convert").exists()  # the work dir is gone


def test_samples_of_the_converted_dataset_equal_the_v21_rows_and_frames(v21_root: Path, reference: Path):
    source = read_v21(v21_root)
    rows = pq.read_table([v21_root / source.data_file(e.episode_index) for e in source.episodes][0])
    dataset = LeRobotDataset(root=reference, return_uint8=True)
    assert len(dataset) == sum(e.length for e in source.episodes)
    offsets = np.cumsum([0] + [e.length for e in source.episodes])
    for episode in source.episodes:
        rows = pq.read_table(v21_root / source.data_file(episode.episode_index)).to_pydict()
        for frame in (0, episode.length // 2, episode.length - 1):
            sample = dataset[int(offsets[episode.episode_index] + frame)]
            assert int(sample["episode_index"]) == episode.episode_index and int(sample["frame_index"]) == frame
            np.testing.assert_array_equal(
                sample["observation.state"].numpy(), np.asarray(rows["observation.state"][frame], dtype=np.float32)
            )
            assert sample["task"] == source.tasks[rows["task_index"][frame]]
            for camera in (0, 1):
                frame_chw = sample[f"observation.images.cam{camera}"].numpy()
                assert read_marker(frame_chw) == (episode.episode_index, frame, camera)


def test_metadata_is_lerobots(v21_root: Path, reference: Path):
    info = json.loads((reference / "meta/info.json").read_text())
    v21 = json.loads((v21_root / "meta/info.json").read_text())
    assert list(info) == [
        "codebase_version",
        "fps",
        "features",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "chunks_size",
        "data_files_size_in_mb",
        "video_files_size_in_mb",
        "data_path",
        "video_path",
        "robot_type",
        "splits",
    ]
    assert info["codebase_version"] == "v3.0" and "total_videos" not in info and "total_chunks" not in info
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (DATA_MB, VIDEO_MB)
    assert all(f.get("fps") == 20 for f in info["features"].values() if f["dtype"] != "video")
    assert all("fps" not in f for f in info["features"].values() if f["dtype"] == "video")
    assert info["total_frames"] == v21["total_frames"] and info["splits"] == v21["splits"]
    table = pq.read_table(reference / "meta/episodes/chunk-000/file-000.parquet")
    names = table.column_names
    assert names[:5] == [
        "episode_index",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
    ]
    assert names[-2:] == ["meta/episodes/chunk_index", "meta/episodes/file_index"]
    assert str(table.schema.field("stats/observation.images.cam0/mean").type) == (
        "list<element: list<element: list<element: double>>>"
    )
    # to_timestamp of one episode is from_timestamp of the next inside a file; 0.0 starts each file
    d = table.to_pydict()
    key = "videos/observation.images.cam0"
    for a in range(len(d["episode_index"]) - 1):
        if d[f"{key}/file_index"][a] == d[f"{key}/file_index"][a + 1]:
            assert d[f"{key}/to_timestamp"][a] == d[f"{key}/from_timestamp"][a + 1]
        else:
            assert d[f"{key}/from_timestamp"][a + 1] == 0.0
    assert verify(reference)["problems"] == []


def test_in_place_keeps_the_input_as_root_old(v21_root: Path, reference: Path, tmp_path: Path):
    root = copy_tree(v21_root, tmp_path / "ds")
    before = tree_listing(root)
    summary = convert(root, workers=2, data_file_size_in_mb=DATA_MB, video_file_size_in_mb=VIDEO_MB, log=quiet)
    assert summary["output"] == str(root)
    assert compare_datasets(root, reference) == []
    assert tree_listing(tmp_path / "ds_old") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ds_old"]  # nothing else left beside them


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_h264_with_b_frames_converts_verifies_and_reads_every_frame(backend: str, v21_h264_root: Path, tmp_path: Path):
    """B-frames (negative DTS). The concatenated files' frame times drift off the k/fps grid (each episode's stream
    duration is a few ticks shorter than frames/fps; lerobot's converter writes the same files), so index -> time
    by fps goes wrong in later episodes; the reader falls back to the frames' own pts and returns every frame."""
    convert(
        v21_h264_root,
        out=tmp_path / "out",
        workers=2,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=0.02,
        log=quiet,
    )  # one file per camera: the drift adds up over its episodes
    assert verify(tmp_path / "out")["problems"] == []
    table = pq.read_table(tmp_path / "out/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    starts = [t for c in (0, 1) for t in table[f"videos/observation.images.cam{c}/from_timestamp"]]
    off_grid = any(abs(t * 15 - round(t * 15)) > 1e-3 for t in starts)  # the case under test
    dataset = LeRobotDataset(root=tmp_path / "out", return_uint8=True, video_backend=backend)
    offsets = np.cumsum([0] + table["length"])
    for episode, length in enumerate(table["length"]):
        for frame in range(length):
            sample = dataset[int(offsets[episode] + frame)]
            for camera in (0, 1):
                assert read_marker(sample[f"observation.images.cam{camera}"].numpy()) == (episode, frame, camera)
    if not off_grid:  # older PyAV/x264 (e.g. lerobot 0.6.1's PyAV 15) writes these episodes on the grid
        pytest.skip(
            f"PyAV {av.__version__}'s H.264 episodes stay on the k/fps grid: every frame was read right, "
            "but the off-grid case this test is for could not be built here"
        )


def test_image_dataset_without_videos(tmp_path: Path):
    from robostream.writer.v21 import V21Writer

    rng = np.random.default_rng(0)
    features = {
        "observation.image": {"dtype": "image", "shape": [32, 48, 3], "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": [3], "names": None},
    }
    with V21Writer(tmp_path / "img", 10, features) as writer:
        for length in (5, 7, 4):
            images = rng.integers(0, 255, size=(length, 32, 48, 3), dtype=np.uint8)
            writer.add_episode(
                {"observation.image": images, "observation.state": rng.random((length, 3))},
                task="look",
                video_files={},
                video_stats={},
            )
    convert(tmp_path / "img", out=tmp_path / "out", workers=2, data_file_size_in_mb=0.01, log=quiet)
    info = json.loads((tmp_path / "out/meta/info.json").read_text())
    assert info["video_path"] is None and not (tmp_path / "out/videos").exists()
    schema = pq.read_schema(next((tmp_path / "out/data").rglob("*.parquet")))
    assert str(schema.field("observation.image").type) == "struct<bytes: binary, path: string>"
    dataset = LeRobotDataset(root=tmp_path / "out")
    assert len(dataset) == 16 and dataset[15]["observation.image"].shape == (3, 32, 48)


@pytest.mark.parametrize("executor", ["datatrove-local"])
def test_datatrove_executor_writes_the_same(executor: str, v21_root: Path, reference: Path, tmp_path: Path):
    convert(
        v21_root,
        out=tmp_path / "out",
        workers=2,
        executor=executor,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=quiet,
    )
    assert compare_datasets(tmp_path / "out", reference) == []


def test_more_than_999_chunks_keep_episode_order(tmp_path: Path):
    """chunk-1000 sorts before chunk-101 as text (lerobot pairs files by sorted glob); paths come from the episode
    index here, so episodes stay in order past 999 chunks."""
    from robostream.writer.v21 import V21Writer

    features = {"observation.state": {"dtype": "float32", "shape": [2], "names": None}}
    with V21Writer(tmp_path / "many", 10, features, chunks_size=1) as writer:
        for episode in range(1002):
            writer.add_episode(
                {"observation.state": np.full((1, 2), episode, dtype=np.float32)},
                task="t",
                video_files={},
                video_stats={},
            )
    assert (tmp_path / "many/data/chunk-1001/episode_001001.parquet").is_file()
    convert(tmp_path / "many", out=tmp_path / "out", workers=2, data_file_size_in_mb=0.01, log=quiet)
    rows = pq.read_table(sorted((tmp_path / "out/data").rglob("*.parquet"))[0], columns=["episode_index"])
    table = pq.read_table(tmp_path / "out/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert table["episode_index"] == list(range(1002)) and table["dataset_from_index"] == list(range(1002))
    states = LeRobotDataset(root=tmp_path / "out")
    assert [int(states[i]["episode_index"]) for i in (0, 101, 999, 1000, 1001)] == [0, 101, 999, 1000, 1001]
    assert [float(states[i]["observation.state"][0]) for i in (101, 1000)] == [101.0, 1000.0]
    assert rows.column("episode_index").to_pylist() == sorted(rows.column("episode_index").to_pylist())


def test_an_episodes_table_above_lerobots_limit_is_split_into_files_readers_load(
    v21_root: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from robostream.convert import finalize

    monkeypatch.setattr(finalize, "EPISODES_TABLE_REFUSED_BYTES", 2000)  # a few episodes per file
    convert(
        v21_root,
        out=tmp_path / "out",
        workers=2,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=quiet,
    )
    files = sorted((tmp_path / "out/meta/episodes").rglob("*.parquet"))
    assert len(files) >= 2
    for index, path in enumerate(files):
        column = pq.read_table(path, columns=["meta/episodes/file_index"]).column(0).to_pylist()
        assert set(column) == {index} and path.name == f"file-{index:03d}.parquet"
    assert verify(tmp_path / "out")["problems"] == []
    ours, theirs = LeRobotDataset(root=tmp_path / "out"), LeRobotDataset(root=reference)
    for index in (0, len(theirs) // 2, len(theirs) - 1):
        a, b = ours[index], theirs[index]
        assert a.keys() == b.keys()
        assert all((a[k] == b[k]).all() if hasattr(a[k], "shape") else a[k] == b[k] for k in a)


def _depth_mp4(path: Path, episode: int, length: int) -> np.ndarray:
    """Lossless 12-bit HEVC (gray12le), lerobot's depth-camera encoding; returns the frames written."""
    import av

    frames = (
        (np.arange(48 * 64, dtype=np.uint16).reshape(48, 64) * 7 + episode * 1000)[None]
        + 37 * np.arange(length, dtype=np.uint16)[:, None, None]
    ) % 4096
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx265", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "gray12le"
        stream.options = {"x265-params": "lossless=1:log-level=none"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="gray12le")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return frames


def test_depth_camera_12_bit_hevc_is_copied_losslessly(tmp_path: Path):
    import av

    from robostream.writer.v21 import V21Writer

    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": None},
        "observation.images.depth": {"dtype": "video", "shape": [48, 64, 1], "names": ["height", "width", "channels"]},
    }
    written = []
    with V21Writer(tmp_path / "depth", 10, features, codec="hevc") as writer:
        for episode, length in enumerate((6, 9, 5, 7)):
            mp4 = tmp_path / f"ep{episode}.mp4"
            written.append(_depth_mp4(mp4, episode, length))
            stats = {k: np.full((1, 1, 1), 0.5) for k in ("min", "max", "mean", "std")}
            writer.add_episode(
                {"observation.state": np.zeros((length, 2), np.float32)},
                task="depth",
                video_files={"observation.images.depth": mp4},
                video_stats={"observation.images.depth": {**stats, "count": np.array([length])}},
            )
    convert(tmp_path / "depth", out=tmp_path / "out", workers=2, video_file_size_in_mb=0.004, log=quiet)
    assert verify(tmp_path / "out")["problems"] == []
    table = pq.read_table(tmp_path / "out/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    key = "videos/observation.images.depth"
    assert len(set(table[f"{key}/file_index"])) >= 2
    for episode, frames in enumerate(written):
        path = (
            tmp_path
            / f"out/videos/observation.images.depth/chunk-000/file-{table[f'{key}/file_index'][episode]:03d}.mp4"
        )
        with av.open(str(path)) as container:
            decoded = {round(float(f.pts * f.time_base), 3): f.to_ndarray() for f in container.decode(video=0)}
        start = table[f"{key}/from_timestamp"][episode]
        for index, frame in enumerate(frames):
            got = decoded[round(start + index / 10, 3)]
            assert got.dtype == np.uint16 and np.array_equal(got, frame)
