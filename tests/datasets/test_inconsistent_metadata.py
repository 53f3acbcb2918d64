"""Datasets whose files disagree with their metadata (issue 21): never a silently wrong or padded sample.

Each case damages a copy of the small AV1 fixture the way a careless tool or a hostile upload would, and asserts
the readers fail with an error naming the file and the key (or follow lerobot where lerobot reads it).
"""

import json
import math
import shutil

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.errors import DatasetFormatError, VideoDecodeError
from robostream.format.metadata import load_metadata
from robostream.numbers import BadNumberError
from robostream.video.encode import encode_video
from tests.helpers import copy_tree


@pytest.fixture()
def broken(av1_root, tmp_path):
    return copy_tree(av1_root, tmp_path / "ds")


def _edit_info(root, edit):
    path = root / "meta/info.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))  # NaN and Infinity are written as JSON's (Python's) NaN / Infinity


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fps", math.nan, "'fps': expected a finite number, got nan"),
        ("fps", math.inf, "'fps': expected a finite number, got inf"),
        ("fps", "20", "'fps': expected a number, got '20'"),
        ("fps", True, "'fps': expected a number, got True"),
        ("fps", 0, "'fps': must be > 0"),
        ("total_frames", "lots", "'total_frames': expected an integer, got 'lots'"),
        ("chunks_size", 0, "'chunks_size': must be > 0"),
        ("data_files_size_in_mb", math.nan, "'data_files_size_in_mb': expected a finite number"),
    ],
)
def test_non_finite_or_mistyped_info_numbers_are_refused_by_key(broken, key, value, message):
    _edit_info(broken, lambda doc: doc.update({key: value}))
    with pytest.raises(DatasetFormatError, match="meta/info.json") as err:
        LeRobotDataset(root=broken)
    assert message in str(err.value)


@pytest.mark.parametrize("bad_key", ["observation.sta\x00te", "observation.state\n"])
def test_control_characters_in_a_feature_key_are_refused(broken, bad_key):
    def rename(doc):
        doc["features"][bad_key] = doc["features"].pop("observation.state")

    _edit_info(broken, rename)
    with pytest.raises(DatasetFormatError, match="control characters"):
        LeRobotDataset(root=broken)


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ([0.0, math.nan], r"delta_timestamps\['action'\]\[1\]: expected a finite number, got nan"),
        ([-math.inf, 0.0], r"delta_timestamps\['action'\]\[0\]: expected a finite number, got -inf"),
        ([None, 0.0], r"delta_timestamps\['action'\]\[0\]: expected a number, got None"),
        (0.05, r"delta_timestamps\['action'\] must be a non-empty list of seconds, got 0.05"),
        ("0.05", r"delta_timestamps\['action'\] must be a non-empty list of seconds"),
    ],
)
def test_delta_timestamps_must_be_finite_seconds(av1_root, window, message):
    for make in (LeRobotDataset, StreamingLeRobotDataset):
        with pytest.raises(ValueError, match=message):
            make(root=av1_root, delta_timestamps={"action": window})


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -1e-4, "1e-4"])
def test_tolerance_must_be_a_finite_non_negative_number(av1_root, tolerance):
    with pytest.raises(BadNumberError, match="tolerance_s"):
        LeRobotDataset(root=av1_root, tolerance_s=tolerance)
    with pytest.raises(BadNumberError, match="tolerance_s"):
        LeRobotDataset(root=av1_root, tolerance_s=tolerance, delta_timestamps={"action": [0.0]})


def _rewrite_data(root, edit):
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(edit(table), path)


def _cast_column(table, key, to_type):
    return table.set_column(table.column_names.index(key), key, table.column(key).cast(to_type))


def test_stored_dtypes_are_cast_to_the_declared_ones_like_lerobot(av1_root, broken):
    """A float64 state and a float64 index come back as info.json declares them (float32, int64), as lerobot
    0.6.1 casts them; values are the stored ones."""
    state = pa.list_(pa.float64(), 6)
    _rewrite_data(broken, lambda t: _cast_column(_cast_column(t, "observation.state", state), "index", pa.float64()))
    expected, got = LeRobotDataset(root=av1_root), LeRobotDataset(root=broken)
    for position in (0, len(expected) - 1):
        assert got[position]["observation.state"].dtype == torch.float32
        assert got[position]["index"].dtype == torch.int64
        assert torch.equal(got[position]["observation.state"], expected[position]["observation.state"])
        assert int(got[position]["index"]) == int(expected[position]["index"])
    first = next(iter(StreamingLeRobotDataset(root=broken, shuffle=False)))
    assert first["observation.state"].dtype == torch.float32 and first["index"].dtype == torch.int64


def test_a_fractional_index_is_an_error_not_a_truncation(broken):
    _rewrite_data(
        broken, lambda t: t.set_column(t.column_names.index("index"), "index", pa.array(np.arange(t.num_rows) + 0.5))
    )
    with pytest.raises(DatasetFormatError, match=r"file-000.parquet: column 'index' could not be read as int64"):
        LeRobotDataset(root=broken)[0]


def test_a_state_narrower_than_declared_is_an_error_naming_the_column(broken):
    """A 6-d stored state declared as 12-d: lerobot fails; so do both readers, naming the file and column."""
    _edit_info(broken, lambda doc: doc["features"]["observation.state"].update(shape=[12]))
    message = (
        r"file-000.parquet: column 'observation.state' holds \[6\] per frame, but meta/info.json declares "
        r"shape \[12\]"
    )
    with pytest.raises(DatasetFormatError, match=message):
        LeRobotDataset(root=broken)[0]
    with pytest.raises(DatasetFormatError, match=message):
        next(iter(StreamingLeRobotDataset(root=broken, shuffle=False)))


def _edit_episodes(root, column, edit):
    path = next((root / "meta/episodes").glob("*/*.parquet"))
    table = pq.read_table(path)
    values = edit(table.column(column))
    pq.write_table(table.set_column(table.column_names.index(column), column, values), path)
    return path


def test_an_episode_span_a_frame_off_is_refused_at_construction(broken):
    """from_timestamp one frame late: each sample would be its neighbour frame, inside the tolerance."""
    key = load_metadata(broken).video_keys[0]
    _edit_episodes(
        broken,
        f"videos/{key}/from_timestamp",
        lambda c: pa.array([v + (1 / 20 if i == 2 else 0) for i, v in enumerate(c.to_pylist())]),
    )
    with pytest.raises(
        DatasetFormatError,
        match=rf"episode 2 camera '{key}': video span .* lasts .* but its "
        r"\d+ frames at 20 fps last",
    ):
        LeRobotDataset(root=broken)


@pytest.mark.parametrize("episodes", [None, [0]])
@pytest.mark.parametrize("reader", [LeRobotDataset, StreamingLeRobotDataset])
def test_a_span_shifted_a_frame_at_both_ends_is_refused_at_construction(broken, reader, episodes):
    """Episode 1's span of cam0 a frame late at both ends keeps its length, but covers the first frame of episode 2
    (the next one in the same file): both readers refuse it, also for a selection of other episodes (the whole
    table is checked)."""
    meta = load_metadata(broken)
    key = meta.video_keys[0]
    assert meta.video_file(1, key) == meta.video_file(2, key)  # the fixture's cam0 holds episodes 0-2 in one file
    for end in ("from_timestamp", "to_timestamp"):
        _edit_episodes(
            broken,
            f"videos/{key}/{end}",
            lambda c: pa.array([v + (1 / 20 if i == 1 else 0) for i, v in enumerate(c.to_pylist())]),
        )
    with pytest.raises(
        DatasetFormatError,
        match=rf"camera '{key}': in {meta.video_file(1, key)} the video spans of "
        r"episode 1 \[1\.55, 3\.0\) s and episode 2 \[2\.95, 4\.15\) s "
        "overlap",
    ):
        reader(root=broken, episodes=episodes)


def _files_of(meta, key):
    """Camera `key`'s files, each with its episodes in file order."""
    files = {}
    for episode in meta.episodes.episode_index.tolist():
        files.setdefault(meta.video_file(episode, key), []).append(episode)
    return files


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
@pytest.mark.parametrize("which", ["the last of several", "the only one"])
@pytest.mark.parametrize("reader", [LeRobotDataset, StreamingLeRobotDataset])
def test_a_span_shifted_past_the_end_of_its_file_is_refused_when_the_file_is_opened(broken, reader, which, backend):
    """The last episode of a camera file (or a file's only one) with its span a frame late at both ends: no
    neighbour to overlap, the same length, so construction passes; the readers used to return each frame's next
    one silently and fail only on the last. Opening the file now refuses it, whichever of its episodes is read
    first, naming camera, file, episode and both times."""
    meta = load_metadata(broken)
    key, relative, episodes = next(
        (k, f, e)
        for k in meta.video_keys
        for f, e in _files_of(meta, k).items()
        if (len(e) > 1) == (which == "the last of several")
    )
    shifted, read = episodes[-1], episodes[0]
    for end in ("from_timestamp", "to_timestamp"):
        _edit_episodes(
            broken,
            f"videos/{key}/{end}",
            lambda c: pa.array([v + (1 / 20 if i == shifted else 0) for i, v in enumerate(c.to_pylist())]),
        )
    ends_at = meta.episodes.video_span(shifted, key).to_timestamp
    message = (
        rf"{relative}: camera '{key}': the video span of episode {shifted} ends at {ends_at + 1 / 20:.6f} s "
        rf"but the video stream ends at {ends_at:.6f} s"
    )
    dataset = reader(root=broken, episodes=[read], video_backend=backend)  # construction reads no video
    with pytest.raises(VideoDecodeError, match=message):
        dataset[0] if reader is LeRobotDataset else next(iter(dataset))


def test_a_string_locating_column_names_the_column(broken):
    _edit_episodes(broken, "data/file_index", lambda c: pa.array([str(v) for v in c.to_pylist()]))
    with pytest.raises(
        DatasetFormatError,
        match=r"episode metadata column 'data/file_index' holds string, expected "
        "integers",
    ):
        LeRobotDataset(root=broken)


def test_a_video_at_another_frame_rate_is_refused_when_opened(broken):
    """An mp4 at 40 fps in a 20 fps dataset would give frame 2k for frame k, all within tolerance."""
    meta = load_metadata(broken)
    key = meta.video_keys[0]
    victim = meta.local(meta.video_file(0, key), "t")
    with av.open(str(victim)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    encode_video(frames, victim.with_suffix(".tmp.mp4"), fps=40, codec="h264", gop=2)
    shutil.move(victim.with_suffix(".tmp.mp4"), victim)
    dataset = LeRobotDataset(root=broken)
    with pytest.raises(
        VideoDecodeError,
        match=rf"{victim.name}: the video stream runs at 40 fps but meta/info.json "
        "says the dataset's fps is 20",
    ):
        dataset[0]


def test_a_video_of_another_frame_size_is_refused(broken):
    key = load_metadata(broken).video_keys[1]
    _edit_info(broken, lambda doc: doc["features"][key].update(shape=[32, 32, 3]))
    with pytest.raises(VideoDecodeError, match=rf"the video's frames are 64x64 .* declares 32x32 for camera '{key}'"):
        LeRobotDataset(root=broken)[0]
    with pytest.raises(VideoDecodeError, match="declares 32x32"):
        next(iter(StreamingLeRobotDataset(root=broken, shuffle=False)))


def test_a_hub_cache_snapshot_reads_like_the_dataset(av1_root, tmp_path):
    """huggingface_hub's cache keeps every file of a snapshot as a symlink to ../../blobs/<hash>; lerobot reads
    such a folder and so must robostream (the links stay inside the cache's own tree)."""
    repo = tmp_path / "datasets--org--name"
    snapshot = repo / "snapshots" / ("a" * 40)
    (repo / "blobs").mkdir(parents=True)
    for number, path in enumerate(sorted(p for p in av1_root.rglob("*") if p.is_file())):
        blob = repo / "blobs" / f"{number:064x}"
        shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(av1_root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"{'../' * (len(path.relative_to(av1_root).parts) + 1)}blobs/{blob.name}")
    expected, got = LeRobotDataset(root=av1_root), LeRobotDataset(root=snapshot)
    for position in (0, len(expected) - 1):
        for key, value in expected[position].items():
            assert torch.equal(got[position][key], value) if torch.is_tensor(value) else got[position][key] == value


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda t: t.set_column(
                t.column_names.index("timestamp"), "timestamp", pa.array([math.nan] * t.num_rows, pa.float32())
            ),
            r"file-000.parquet: episode 0 frame 0 has timestamp nan, outside the episode's",
        ),
        (
            lambda t: t.set_column(
                t.column_names.index("action"), "action", pa.array([None] * t.num_rows, t.column("action").type)
            ),
            r"file-000.parquet: column 'action' could not be read as float32 \[6\] .*: \d+ null row",
        ),
    ],
)
def test_unusable_data_values_name_the_file_and_column(broken, damage, message):
    _rewrite_data(broken, damage)
    with pytest.raises(DatasetFormatError, match=message):
        LeRobotDataset(root=broken)[0]
    with pytest.raises(DatasetFormatError, match=message):
        next(iter(StreamingLeRobotDataset(root=broken, shuffle=False)))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("info.json", b"\xff\xfe\x00", "info.json: not UTF-8 text"),
        ("stats.json", b"[1, 2]", "stats.json: expected an object of features"),
    ],
)
def test_undecodable_metadata_files_are_named(broken, name, content, message):
    (broken / "meta" / name).write_bytes(content)
    with pytest.raises(DatasetFormatError, match=message):
        LeRobotDataset(root=broken)


def test_an_unknown_feature_dtype_is_refused_at_construction(broken):
    _edit_info(broken, lambda doc: doc["features"]["action"].update(dtype="float128x"))
    with pytest.raises(DatasetFormatError, match="feature 'action' has dtype 'float128x', neither a numeric dtype"):
        LeRobotDataset(root=broken)


@pytest.mark.parametrize("position", [1.5, True, "3", np.float64(2.0)])
def test_map_style_positions_must_be_integers(av1_root, position):
    """A float or a bool used to be truncated to a frame silently (dataset[1.5] -> frame 1, dataset[True] -> 1)."""
    with pytest.raises(TypeError, match="expected an integer position"):
        LeRobotDataset(root=av1_root)[position]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"proportion": math.nan}, "proportion: expected a finite number, got nan"),
        ({"proportion": math.inf}, "proportion: expected a finite number, got inf"),
        ({"repeat": math.nan}, "repeat: expected a finite number"),
        ({"repeat": -1}, "repeat: must be >= 0"),
    ],
)
def test_mixture_weights_must_be_finite(av1_root, weights, message):
    from robostream import Mixture, Source

    with pytest.raises(ValueError, match=message):
        StreamingLeRobotDataset(
            mixture=Mixture(sources=[Source(root=av1_root, **weights), Source(root=av1_root, **weights)])
        )


@pytest.mark.parametrize(
    "damage",
    [
        lambda folder: (
            (folder / "columns.bin").write_bytes((folder / "columns.bin").read_bytes()[:-7])
            if (folder / "columns.bin").is_file()
            else None
        ),
        lambda folder: (folder / "columns.json").write_text("{") if (folder / "columns.json").is_file() else None,
        lambda folder: (
            (folder / "episodes-0.arrays").write_bytes(b"cut") if (folder / "episodes-0.arrays").is_file() else None
        ),  # the metadata snapshot (format/metadata_snapshot.py)
        lambda folder: (folder / "metadata.json").write_text("{") if (folder / "metadata.json").is_file() else None,
    ],
)
def test_a_damaged_node_cache_entry_is_rebuilt_not_fatal(av1_root, tmp_path, damage):
    """A derived-cache entry truncated or edited on disk used to fail every later start."""
    from robostream import ReadOptions

    options = ReadOptions(cache_dir=tmp_path / "cache", cache_limit="1gb")
    expected = LeRobotDataset(root=av1_root, read_options=options)[5]  # builds the entries
    for folder in (tmp_path / "cache" / "derived").iterdir():
        if folder.is_dir() and not folder.name.startswith("."):
            damage(folder)
    with pytest.warns(RuntimeWarning, match="derived-data cache entry is damaged"):
        got = LeRobotDataset(root=av1_root, read_options=options)[5]
    assert all(torch.equal(got[k], v) for k, v in expected.items() if torch.is_tensor(v))
