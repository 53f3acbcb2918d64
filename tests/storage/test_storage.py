"""Storage over fsspec's in-memory filesystem: the remote code path (ranged reads) without a network."""

import io
import uuid

import fsspec
import pytest
import torch

from robostream import LeRobotDataset, StreamingLeRobotDataset
from robostream.errors import MissingFileError, TooLargeError, UnsafePathError
from robostream.storage.options import ReadOptions
from robostream.storage.read_ahead import DEFAULT_MAX_IN_FLIGHT
from robostream.storage.store import RangedReader, Storage


@pytest.fixture()
def memory_copy(av1_root):
    fs = fsspec.filesystem("memory")
    name = f"ds-{uuid.uuid4().hex[:8]}"
    for path in av1_root.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/{name}/{path.relative_to(av1_root)}", path.read_bytes())
    yield f"memory://{name}"
    fs.rm(f"/{name}", recursive=True)


def test_ranged_reader_reads_any_span(memory_copy):
    storage = Storage(memory_copy)
    data = storage.read_bytes("meta/info.json")
    reader = storage.open("meta/info.json")
    assert isinstance(reader, RangedReader) and reader.size() == len(data)
    reader._block_size = 7  # many blocks for a small file
    reader.seek(5)
    assert reader.read(20) == data[5:25]
    reader.seek(-10, io.SEEK_END)
    assert reader.read() == data[-10:]
    assert reader.read(5) == b""
    stats = storage.stats()
    assert stats.bytes_read >= len(data) and stats.requests >= 2  # the whole file, then its blocks
    assert stats.requests_s > 0 and stats.max_in_flight == DEFAULT_MAX_IN_FLIGHT  # fetch's busy time and threads


def test_missing_and_unsafe_paths(memory_copy):
    storage = Storage(memory_copy)
    with pytest.raises(MissingFileError, match="videos/none.mp4: video not found"):
        storage.open("videos/none.mp4", what="video")
    with pytest.raises(UnsafePathError):
        storage.open("../outside", what="x")


def test_remote_samples_equal_local_samples(memory_copy, av1_root):
    remote = StreamingLeRobotDataset(root=memory_copy, seed=3, return_uint8=True)
    local = StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True)
    for a, b in zip(remote, local, strict=True):
        assert a.keys() == b.keys()
        for key in b:
            assert torch.equal(a[key], b[key]) if isinstance(b[key], torch.Tensor) else a[key] == b[key]
    sample = LeRobotDataset(root=memory_copy, video_backend="pyav", return_uint8=True)[9]
    torch.testing.assert_close(
        sample["observation.images.cam1"],
        LeRobotDataset(root=av1_root, video_backend="pyav", return_uint8=True)[9]["observation.images.cam1"],
    )


def test_data_files_root_reads_files_from_elsewhere(memory_copy, av1_root):
    dataset = LeRobotDataset(root=av1_root, read_options=ReadOptions(data_files_root=memory_copy), return_uint8=True)
    assert dataset.meta.data_storage.url == memory_copy and dataset.meta.storage.is_local
    assert int(dataset[3]["index"]) == 3
    assert dataset.meta.data_storage.stats().bytes_read > 0


def test_relative_local_roots_work(av1_root, monkeypatch):
    monkeypatch.chdir(av1_root.parent)
    assert len(LeRobotDataset(root=av1_root.name)) == len(LeRobotDataset(root=av1_root))


def test_s3_without_the_optional_s3fs_says_which_extra_to_install(monkeypatch):
    """s3fs is the extra `robostream[s3]` (it pins fsspec exactly): without it, s3:// fails clearly at once."""
    import sys

    from robostream.errors import RobostreamError
    from robostream.storage.store import Storage

    monkeypatch.setitem(sys.modules, "s3fs", None)  # what an environment without s3fs gives: ImportError
    with pytest.raises(RobostreamError, match=r"s3://bucket/ds: reading s3:// needs s3fs.*robostream\[s3\]"):
        Storage("s3://bucket/ds")


def test_a_local_file_read_whole_stops_at_its_bound(tmp_path):
    """One rule for every whole-file read (issue 32): a local file is read up to its bound and one byte, no further."""
    (tmp_path / "f.json").write_bytes(b"{" * 1000)
    with pytest.raises(TooLargeError, match="f.json: 1000 bytes or more, more than the 999 bytes a file read whole"):
        Storage(tmp_path).read_bytes("f.json", limit=999)
    assert Storage(tmp_path).read_bytes("f.json", limit=1000) == b"{" * 1000


def test_a_storage_reads_as_its_read_options_say(tmp_path):
    """Every field of the ReadOptions a Storage is built from reaches what reads (no keyword restated by a caller):
    the request options, the retry policy (and its timeout on the client), the disk cache, the read buffer, the
    requests in flight and the validation."""
    from robostream.storage.retry import RetryPolicy

    policy = RetryPolicy(max_attempts=2, timeout_s=3)
    options = ReadOptions(
        storage_options={"headers": {"X-Token": "t"}},
        retry=policy,
        cache_dir=tmp_path / "cache",
        cache_limit="1mb",
        read_buffer="2mb",
        max_in_flight=3,
        validate="full",
    )
    storage = Storage("http://127.0.0.1:1/ds", options)  # nothing is requested before a read
    assert storage.read_options is options and storage.retry is policy
    assert storage.home.request_options == {"headers": {"X-Token": "t"}}
    assert storage.fs.client_kwargs["timeout"].total == 3
    assert storage.cache is not None and (storage.cache.directory, storage.cache.limit) == (tmp_path / "cache", 10**6)
    assert storage.block_budget == storage.blocks.budget_bytes == 2 * 10**6
    assert storage.read_ahead.max_in_flight == 3
    assert storage.read_options.validate == "full"
    assert Storage("http://127.0.0.1:1/ds", options, cache_files=False).cache is None
    defaults = Storage("http://127.0.0.1:1/ds")
    assert defaults.retry == RetryPolicy() and defaults.cache is None and defaults.home.request_options == {}
