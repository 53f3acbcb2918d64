"""Data rows read per episode from parquet files laid out in other ways than lerobot's recorder (one row group
per episode): several row groups per episode, several episodes per row group (converted datasets), and files
written without statistics. Both datasets must give exactly the samples of the original layout."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from robostream import LeRobotDataset, StreamingLeRobotDataset
from robostream.format.data_rows import DataRowReader
from robostream.format.metadata import load_metadata
from tests.helpers import assert_same_sample, copy_tree


def _rewrite(root, **write_options):
    for path in sorted(root.glob("data/*/*.parquet")):
        pq.write_table(pq.read_table(path), path, **write_options)
    return root


@pytest.fixture(scope="module", params=["several_groups_per_episode", "several_episodes_per_group", "no_stats"])
def relaid(request, av1_root, tmp_path_factory):
    root = copy_tree(av1_root, tmp_path_factory.mktemp(request.param) / "ds")
    options = {
        "several_groups_per_episode": {"row_group_size": 5},
        "several_episodes_per_group": {"row_group_size": 1000},
        "no_stats": {"row_group_size": 7, "write_statistics": False},
    }[request.param]
    return request.param, _rewrite(root, **options)


def test_layout_is_what_the_test_claims(relaid):
    name, root = relaid
    meta = load_metadata(root)
    parquet = pq.ParquetFile(meta.local(meta.data_file(0), "t"))
    episodes_per_group = [
        len(set(parquet.read_row_group(g, columns=["episode_index"]).column(0).to_pylist()))
        for g in range(parquet.metadata.num_row_groups)
    ]
    if name == "several_groups_per_episode":
        assert parquet.metadata.num_row_groups > 2 * len(
            set(parquet.read(columns=["episode_index"]).column(0).to_pylist())
        )
    elif name == "several_episodes_per_group":
        assert max(episodes_per_group) > 1
    else:
        assert parquet.metadata.row_group(0).column(0).statistics is None


def test_map_style_and_streaming_match_the_original(relaid, av1_root):
    _, root = relaid
    original, mine = LeRobotDataset(root=av1_root, return_uint8=True), LeRobotDataset(root=root, return_uint8=True)
    for position in range(0, len(original), 5):
        assert_same_sample(mine[position], original[position])
    stream = {int(s["index"]): s for s in StreamingLeRobotDataset(root=root, seed=3, return_uint8=True)}
    assert sorted(stream) == list(range(len(original)))
    for index in range(0, len(original), 7):
        assert_same_sample(stream[index], original[index])


@pytest.mark.parametrize("row_group_size,groups_read", [(5, "several"), (1000, "one")])
def test_only_the_episodes_row_groups_are_read(av1_root, tmp_path, row_group_size, groups_read):
    """With statistics, an episode costs the row groups that can hold it, not the whole file."""
    root = _rewrite(copy_tree(av1_root, tmp_path / "ds"), row_group_size=row_group_size)
    meta = load_metadata(root)
    reader = DataRowReader(meta)
    episode = int(meta.episodes.episode_index[1])
    assert len(reader.episode(episode)) == int(meta.episodes.length[1])
    data_file = reader._file(meta.data_file(episode), episode)
    candidates = int(((data_file.episode_lo <= episode) & (episode <= data_file.episode_hi)).sum())
    if groups_read == "several":  # an episode spans several groups, and the file has more than those
        assert 2 <= candidates < data_file.parquet.metadata.num_row_groups
    else:  # one group holds several episodes: that one is read
        assert candidates == 1


def _open_parquet_files(root) -> set[str]:
    """The data files of `root` this process holds open."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and target.endswith(".parquet"):
            held.add(target)
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc/self/fd")
def test_open_data_files_stay_within_footers_and_a_file_in_use_is_never_closed(av1_root, tmp_path):
    """Evicted files are closed when evicted (not whenever the garbage collector runs), one open copy per file, and
    never while a read is using them: the open files are `footers`, more only while more reads are in progress."""
    root = copy_tree(av1_root, tmp_path / "ds")
    meta = load_metadata(root)
    reader = DataRowReader(meta, footers=1)
    by_file: dict[str, int] = {}
    for episode in meta.episodes.episode_index.tolist():
        by_file.setdefault(meta.data_file(int(episode)), int(episode))
    (first, a), (second, b), (third, c) = list(by_file.items())[:3]
    for episode in meta.episodes.episode_index.tolist() * 2:
        reader.episode(int(episode))
        assert len(_open_parquet_files(root)) == 1
    in_use = reader._file(first, a)
    assert reader._file(first, a) is in_use  # the same open copy
    other = reader._file(second, b)
    assert len(_open_parquet_files(root)) == 2, "a file in use was closed to make room"
    for done in (in_use, in_use, other):
        reader._release(done)
    reader.episode(c)  # the next opening trims the files no read uses
    assert _open_parquet_files(root) == {str(root / third)}
