"""The node's caches serve what the dataset holds now (issue 32, defects 2, 4, 5 and part of 10): entries keyed by
what names a file's content, checked against their digests when opened, kept where only this user can write, and
errors that name the cache when the cache is at fault.

Real parts only: fixture datasets copied and edited on disk, the slow store serving them over HTTP (with or
without ETag / Last-Modified), cache folders whose owner and mode are really changed (os.chown: the tests run as
root in CI; they skip elsewhere).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from robostream import LeRobotDataset, ReadOptions, StreamingLeRobotDataset
from robostream.errors import CacheError, DatasetFormatError
from robostream.format.metadata import metadata_revision, read_tables
from robostream.format.metadata_snapshot import save_tables, snapshot_identity
from robostream.format.tasks import write_tasks
from robostream.storage.retry import RetryPolicy
from robostream.storage.store import Storage
from tests.helpers import copy_tree, data_column
from tests.remote.servers import RangeHTTPServer

FAST = ReadOptions(retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0))
OTHER_UID = 4242  # another user of the node (no account needed: ownership is a number)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a folder's owner needs root")


def _write_data_file(path: Path, table: pa.Table) -> None:
    """A data file whose size depends only on its rows' count and types (no compression, statistics or
    dictionaries), so one with other values has the same size; written beside and renamed, as tools replace files."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="none", write_statistics=False, use_dictionary=False)
    partial = path.with_name(path.name + ".new")
    partial.write_bytes(buffer.getvalue())
    os.replace(partial, path)


def _shift_action(path: Path, by: float) -> None:
    table = pq.read_table(path)
    action = table.column("action").combine_chunks()
    values = pc.add(action.flatten(), pa.scalar(by, action.type.value_type))
    shifted = pa.FixedSizeListArray.from_arrays(values, action.type.list_size)
    _write_data_file(path, table.set_column(table.schema.get_field_index("action"), "action", shifted))


@pytest.fixture()
def root(av1_root, tmp_path):
    """A copy of the fixture whose first data file has a same-size encoding (see _write_data_file)."""
    copy = copy_tree(av1_root, tmp_path / "ds")
    first = sorted(copy.glob("data/*/*.parquet"))[0]
    _write_data_file(first, pq.read_table(first))
    return copy


def _replace_first_data_file(root: Path, *, keep_mtime: bool) -> None:
    """Every action of the first data file + 100, the file's size unchanged (and its mtime, or 2 s later)."""
    first = sorted(root.glob("data/*/*.parquet"))[0]
    before = first.stat()
    _shift_action(first, 100.0)
    mtime = before.st_mtime_ns if keep_mtime else before.st_mtime_ns + 2_000_000_000
    os.utime(first, ns=(mtime, mtime))
    assert first.stat().st_size == before.st_size


def _map_actions(dataset: LeRobotDataset, positions: range) -> np.ndarray:
    return np.stack([dataset[i]["action"].numpy() for i in positions])


def test_map_style_reads_a_local_data_file_replaced_by_one_of_the_same_size_and_mtime(root):
    """Derived columns were keyed by path, size and mtime: the old values came back (0.618 for 100.618)."""
    positions = range(4)
    LeRobotDataset(root=root)[0]  # converts the data file into the node cache
    _replace_first_data_file(root, keep_mtime=True)
    expected = data_column(root, "action")[[int(LeRobotDataset(root=root)[i]["index"]) for i in positions]]
    assert expected.min() > 50  # the new values
    np.testing.assert_array_equal(_map_actions(LeRobotDataset(root=root), positions), expected)


@pytest.mark.parametrize(
    "validators", [{"etag": False}, {"etag": False, "last_modified": True}], ids=["no-validators", "last-modified"]
)
def test_map_style_over_http_reads_a_data_file_replaced_by_one_of_the_same_size(
    root, validators, tmp_path, monkeypatch
):
    """Remote derived columns were keyed by URL, size and ETag: without an ETag only the size counted, and
    Last-Modified was never used. Now Last-Modified names the version, and nothing derived from a file nothing
    names (its columns, a video's packet index) is kept: its rows are read from its row groups every time."""
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))
    positions = range(4)
    with RangeHTTPServer(root, **validators) as server:
        first = _map_actions(LeRobotDataset(root=server.url, read_options=FAST), positions)
        _replace_first_data_file(root, keep_mtime=False)
        again = _map_actions(LeRobotDataset(root=server.url, read_options=FAST), positions)
    np.testing.assert_allclose(again, first + 100.0, rtol=1e-6)
    kinds = {"metadata.json": "snapshot", "columns.json": "data columns", "packet_index.arrays": "packet index"}
    kept = {kind for entry in _entries(tmp_path) for name, kind in kinds.items() if (entry / name).is_file()}
    assert kept == (
        {"snapshot", "data columns", "packet index"} if validators.get("last_modified") else {"snapshot"}
    ), kept


def _retask(root: Path, change) -> dict[int, str]:
    tasks = LeRobotDataset(root=root).meta.tasks
    changed = {index: change(task) for index, task in tasks.items()}
    write_tasks(root / "meta/tasks.parquet", changed)
    return changed


@pytest.mark.parametrize("etag", [True, False], ids=["etag", "no-etag"])
def test_a_changed_tasks_file_alone_is_read_anew_over_http(root, etag):
    """The snapshot's revision over plain HTTP was info.json's version alone: new task strings (same lengths) were
    served as the old ones, with or without ETags."""
    with RangeHTTPServer(root, etag=etag) as server:
        LeRobotDataset(root=server.url, read_options=FAST)  # keeps the snapshot
        changed = _retask(root, str.upper)
        assert LeRobotDataset(root=server.url, read_options=FAST).meta.tasks == changed


def test_a_same_size_info_json_is_read_anew_over_http_without_validators(root):
    """Without an ETag the snapshot's revision was info.json's size."""
    info = root / "meta/info.json"
    doc = json.loads(info.read_text())
    info.write_text(json.dumps({**doc, "robot_type": "aaaa"}, indent=4))
    with RangeHTTPServer(root, etag=False) as server:
        assert LeRobotDataset(root=server.url, read_options=FAST).meta.info.robot_type == "aaaa"
        size = info.stat().st_size
        info.write_text(json.dumps({**doc, "robot_type": "bbbb"}, indent=4))
        assert info.stat().st_size == size
        assert LeRobotDataset(root=server.url, read_options=FAST).meta.info.robot_type == "bbbb"


def _entries(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_dir() and (p / ".complete").is_file()]


def test_bytes_flipped_in_a_cached_column_file_are_found_and_the_entry_rebuilt(root, tmp_path):
    """A columns.bin edited without changing its size gave silently wrong values."""
    options = ReadOptions(cache_dir=tmp_path / "cache", cache_limit="1gb")
    expected = LeRobotDataset(root=root, read_options=options)[0]
    for columns in (tmp_path / "cache").rglob("columns.bin"):
        action = json.loads((columns.parent / "columns.json").read_text())["action"]["offset"]
        data = bytearray(columns.read_bytes())
        data[action : action + 4] = np.float32(-7.0).tobytes()  # the first row's first action value
        columns.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match=r"derived-data cache entry is damaged .*columns\.bin"):
        got = LeRobotDataset(root=root, read_options=options)[0]
    assert all(torch.equal(got[k], v) for k, v in expected.items() if torch.is_tensor(v))


def test_a_tampered_metadata_snapshot_is_rebuilt_not_served(root, tmp_path):
    """An edited snapshot was served (its tasks) or blamed the dataset ("re-convert")."""
    options = ReadOptions(cache_dir=tmp_path / "cache", cache_limit="1gb")
    tasks = LeRobotDataset(root=root, read_options=options).meta.tasks
    for snapshot in (tmp_path / "cache").rglob("metadata.json"):
        doc = json.loads(snapshot.read_text())
        doc["tasks"] = {key: "POISONED " + task for key, task in doc["tasks"].items()}
        snapshot.write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="derived-data cache entry is damaged"):
        assert LeRobotDataset(root=root, read_options=options).meta.tasks == tasks


def test_datasets_constructed_from_one_kept_snapshot_have_their_own_stats_and_tasks(root, tmp_path):
    """A process keeps a current snapshot parsed (issue 35): lerobot edits its dataset's metadata (e.g. ImageNet
    stats for the cameras), and that edit must not reach another dataset constructed from the same snapshot."""
    options = ReadOptions(cache_dir=tmp_path / "cache", cache_limit="1gb")
    first = LeRobotDataset(root=root, read_options=options).meta
    key = next(k for k, values in first.stats.items() if {"mean", "std"} <= values.keys())
    mean, std = first.stats[key]["mean"].copy(), first.stats[key]["std"].copy()
    first.stats[key]["mean"] += 7  # in place
    first.stats[key]["std"] = std + 7  # replaced
    first.tasks[0] = "EDITED"
    # the stats are made at their first use, then kept: the dataset's edits stay
    np.testing.assert_array_equal(first.stats[key]["mean"], mean + 7)
    np.testing.assert_array_equal(first.stats[key]["std"], std + 7)
    second = LeRobotDataset(root=root, read_options=options).meta
    np.testing.assert_array_equal(second.stats[key]["mean"], mean)
    np.testing.assert_array_equal(second.stats[key]["std"], std)
    assert second.tasks[0] != "EDITED"


def _shared_folder(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o1777)  # like /tmp: every user may create entries in it
    return path


def _plant_snapshot(cache: Path, root: Path) -> None:
    """What another user can do in a shared cache folder: compute the key of a dataset's metadata snapshot from
    what anyone can stat, and write a snapshot with poisoned tasks (and a record of its files) under it."""
    storage = Storage(str(root))
    revision, meta = metadata_revision(storage)
    tables = read_tables(storage, meta)
    planted = cache / hashlib.sha256(snapshot_identity(storage.describe("meta"), revision).encode()).hexdigest()[:40]
    planted.mkdir()
    save_tables(replace(tables, tasks={k: f"POISONED {v}" for k, v in tables.tasks.items()}), planted)
    record = {p.name: [p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()] for p in planted.iterdir()}
    (planted / ".complete").write_text(json.dumps({"files": record}))
    for path in (planted, *planted.iterdir()):
        os.chown(path, OTHER_UID, OTHER_UID)


@as_root
def test_a_snapshot_planted_in_a_shared_cache_folder_is_not_served(root, tmp_path, monkeypatch):
    shared = _shared_folder(tmp_path / "shared")
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(shared))
    _plant_snapshot(shared, root)
    tasks = LeRobotDataset(root=root).meta.tasks
    assert not any("POISONED" in task for task in tasks.values())
    assert (shared / str(os.geteuid())).stat().st_mode & 0o777 == 0o700  # this user's entries: in its own folder


@as_root
@pytest.mark.parametrize("other_owner", [True, False], ids=["owned-by-another-user", "world-writable"])
def test_a_users_folder_another_user_could_write_is_refused(root, tmp_path, monkeypatch, other_owner):
    shared = _shared_folder(tmp_path / "shared")
    mine = shared / str(os.geteuid())
    mine.mkdir()  # made before this user came: by another user, or too open
    if other_owner:
        os.chown(mine, OTHER_UID, OTHER_UID)
    else:
        mine.chmod(0o777)
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(shared))
    with pytest.raises(
        CacheError,
        match=rf"{re.escape(str(mine))}: .*another user could have written its entries"
        r".*ROBOSTREAM_CACHE",
    ):
        LeRobotDataset(root=root)


def test_a_cache_folder_that_cannot_be_made_is_a_clear_error(root, tmp_path):
    """cache_dir inside a file (like a read-only cache folder) failed with a bare OSError from inside the cache."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(
        CacheError,
        match=rf"{re.escape(str(blocker / 'cache'))}: cannot create the disk cache "
        r"folder .*ReadOptions\(cache_dir=\.\.\.\)",
    ):
        LeRobotDataset(root=root, read_options=ReadOptions(cache_dir=blocker / "cache", cache_limit="1gb"))


def test_an_unreadable_disk_cache_copy_is_named_with_how_to_clear_it(root, tmp_path):
    """Bytes a server sent wrong stay in the disk cache after the server is fixed: the error named the server's
    file only, and every later run failed the same way."""
    options = ReadOptions(retry=FAST.retry, cache_dir=tmp_path / "cache", cache_limit="1gb")
    with RangeHTTPServer(root) as server:
        list(StreamingLeRobotDataset(root=server.url, read_options=options))  # every file enters the disk cache
        copies = sorted((tmp_path / "cache").rglob("objects/*/*.parquet"))
        for copy in copies:
            copy.write_bytes(copy.read_bytes()[:-4] + b"XXXX")  # the footer's magic: no longer parquet, same size
        with warnings.catch_warnings(), pytest.raises(DatasetFormatError) as failure:
            warnings.simplefilter("ignore")
            list(StreamingLeRobotDataset(root=server.url, read_options=options))
    message = str(failure.value)
    assert "node's disk cache" in message and "delete that copy" in message
    assert any(str(copy) in message for copy in copies), message
