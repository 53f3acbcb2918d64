"""Integrity of fetched bytes against real servers on 127.0.0.1: the Hub emulator, moto S3 and the HTTP server.

- validate="full": a download into the disk cache whose bytes differ from the hash the host publishes (the Hub's
  sha256 / git blob sha1, an S3 single-part ETag) is detected, fetched once more, and a persistent mismatch fails
  naming the file and both hashes. Corruption is injected by a FaultProxy between the client and the server
  (the server's listing stays right, the bytes on the wire are wrong).
- A file replaced on the server between two range reads of one reader fails (S3 and HTTP: If-Match and the
  answers' size/ETag); a Hub root is pinned to one commit, so a new commit on its branch changes nothing it reads.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from robostream import StreamingLeRobotDataset
from robostream.errors import ChecksumMismatchError, FileChangedError, MissingFileError
from robostream.storage.integrity import Digest
from robostream.storage.options import ReadOptions
from robostream.storage.retry import RetryPolicy
from robostream.storage.store import RangedReader, Storage

from .hub_server import HubServer, huggingface_hub_at
from .servers import FaultProxy, RangeHTTPServer, corrupt, http_status
from .test_remote_sources import _assert_same

pytestmark = pytest.mark.timeout(120)
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0)
SMALL_BUFFER = 1 << 20  # -> 16 KiB blocks: a file of SIZE bytes takes several range requests
SIZE = 100_000
# 16 KiB blocks downloaded one per request: partial ranges, which S3 answers without its whole-object checksum, so
# robostream's own hash is what must catch a corrupted body (a whole-object range is checked by botocore too, and
# a failed check is retried as a corrupted transfer: test_s3_whole_object_range_checked_by_s3_is_retried).
PARTIAL_RANGES = 64 << 10
VIDEO, INFO = "videos/a.mp4", "meta/info.json"  # an LFS file (sha256) and a regular one (git blob sha1) on the Hub


def _bytes(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _replace(path: Path, data: bytes) -> None:
    """Replace a file the way an upload does: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _cached_objects(directory: Path) -> list[Path]:
    return [p for p in (directory / "objects").rglob("*") if p.is_file() and not p.name.endswith((".pin", ".verified"))]


def _corrupt_first(times: int | None, *needles: str):
    """A FaultProxy plan corrupting the first `times` GETs (None: every GET) whose path contains all `needles`."""
    seen = [0]

    def plan(number: int, method: str, path: str):
        if method != "GET" or not all(needle in path for needle in needles):
            return None
        seen[0] += 1
        return corrupt() if times is None or seen[0] <= times else None

    return plan


# --------------------------------------------------------------------------------------------------------------
# Hub (emulator behind a FaultProxy)
# --------------------------------------------------------------------------------------------------------------

BLOBS, MOVING, AV1 = "local/blobs", "local/moving", "local/av1"


@pytest.fixture(scope="module")
def hub(av1_root, tmp_path_factory) -> Iterator[tuple[HubServer, dict[str, FaultProxy]]]:
    """The emulator serving three repos, its API host and its CDN each reached through a transparent FaultProxy
    (tests set their plans; keyed by the route each serves), with huggingface_hub pointed at the API's proxy, the
    Hub's LFS redirects at the CDN's, and nothing but 127.0.0.1 reachable."""
    folders = {}
    for repo in (BLOBS, MOVING):
        folder = tmp_path_factory.mktemp(repo.replace("/", "_"))
        (folder / "videos").mkdir()
        (folder / "meta").mkdir()
        (folder / VIDEO).write_bytes(_bytes(1, SIZE))
        (folder / INFO).write_bytes(b'{"codebase_version": "v3.0", "padding": "' + b"x" * 40_000 + b'"}')
        folders[repo] = folder
    with (
        HubServer({**folders, AV1: av1_root}) as server,
        FaultProxy(server.endpoint) as api,
        FaultProxy(server.cdn_endpoint) as cdn,
        huggingface_hub_at(api.url, tmp_path_factory.mktemp("hf_home")),
    ):
        server.cdn_url = cdn.url
        yield server, {"/resolve/": api, "/cdn/": cdn}


@pytest.fixture
def proxies(hub) -> Iterator[dict[str, FaultProxy]]:
    _, proxies = hub
    for proxy in proxies.values():
        proxy.clear_faults()
        proxy.reset_stats()
    yield proxies
    for proxy in proxies.values():
        proxy.clear_faults()


def _hub_storage(tmp_path: Path, revision: str = "", validate: str = "full") -> Storage:
    root = f"hf://datasets/{BLOBS}" + (f"@{revision}" if revision else "")
    options = ReadOptions(
        retry=FAST_RETRY,
        cache_dir=tmp_path / "cache",
        cache_limit="10mb",
        read_buffer=SMALL_BUFFER,
        validate=validate,
    )
    return Storage(root, options)


def test_hub_hashes_are_the_published_ones_and_cached_copies_are_checked(hub, proxies, tmp_path):
    server, _ = hub
    storage = _hub_storage(tmp_path)
    assert storage.url == f"hf://datasets/{BLOBS}@{server.sha}"  # no revision given: pinned to main's commit
    video, info = (server.repos[BLOBS].commits[server.sha].data(name) for name in (VIDEO, INFO))
    assert storage.stat(VIDEO).digest == Digest("sha256", hashlib.sha256(video).hexdigest())
    assert storage.stat(INFO).digest == Digest("git-sha1", _git_sha1(info))
    for name, data in ((VIDEO, video), (INFO, info)):
        path = storage.open(name)
        assert Path(path).read_bytes() == data
        assert Path(path + ".verified").read_text() == str(storage.stat(name).digest)


# The bytes of an LFS file come from the storage host the Hub redirects to (/cdn/ here), of others from /resolve/.
ROUTES = [(VIDEO, "/cdn/"), (INFO, "/resolve/")]


@pytest.mark.parametrize("name, route", ROUTES, ids=["lfs-sha256", "git-sha1"])
def test_hub_corrupted_download_is_detected_and_fetched_again(hub, proxies, tmp_path, name, route):
    server, _ = hub
    proxies[route].set_plan(_corrupt_first(1, route, quote(name)))
    storage = _hub_storage(tmp_path)
    expected = storage.stat(name).digest
    with pytest.warns(
        RuntimeWarning,
        match=f"{name}: downloaded bytes do not match the published hash "
        f"\\(expected {expected.hexdigest}, got [0-9a-f]+\\); fetching the file "
        "once more",
    ):
        path = storage.open(name)
    assert Path(path).read_bytes() == server.repos[BLOBS].commits[server.sha].data(name)
    assert proxies[route].stats()["by_kind"] == {"corrupt": 1}
    assert len(_cached_objects(tmp_path / "cache")) == 1


@pytest.mark.parametrize("name, route", ROUTES, ids=["lfs-sha256", "git-sha1"])
def test_hub_persistent_corruption_fails_naming_the_file_and_both_hashes(hub, proxies, tmp_path, name, route):
    server, _ = hub
    proxies[route].set_plan(_corrupt_first(None, route, quote(name)))
    storage = _hub_storage(tmp_path)
    expected = storage.stat(name).digest
    with pytest.warns(RuntimeWarning), pytest.raises(ChecksumMismatchError) as info:
        storage.open(name)
    message = str(info.value)
    assert message.startswith(
        f"hf://datasets/{BLOBS}@{server.sha}/{name}: content does not match its published "
        f"{expected.algorithm} after 2 download(s)"
    )
    assert f"expected {expected.hexdigest}, got {info.value.got}" in message and info.value.got != expected.hexdigest
    assert "re-run" in message
    assert _cached_objects(tmp_path / "cache") == []  # the bad copy is not kept
    assert not list((tmp_path / "cache").rglob(".partial-*"))


def test_hub_validate_size_does_not_hash(hub, proxies, tmp_path):
    """The default checks sizes only: a corrupted body of the right size goes through (what "full" is for)."""
    proxies["/cdn/"].set_plan(_corrupt_first(None, "/cdn/", quote(VIDEO)))
    path = _hub_storage(tmp_path, validate="size").open(VIDEO)
    assert Path(path).stat().st_size == SIZE and not Path(path + ".verified").exists()
    assert set(proxies["/cdn/"].stats()["by_kind"]) == {
        "corrupt"
    }  # every request (the file's blocks, merged) was corrupted


def test_hub_root_on_a_branch_reads_one_commit_while_the_branch_moves(hub, proxies, tmp_path):
    from huggingface_hub import HfApi

    server, _ = hub
    before = server.repos[MOVING].sha
    old = server.repos[MOVING].commits[before].data(VIDEO)
    storage = Storage(f"hf://datasets/{MOVING}@main", ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
    assert storage.url == f"hf://datasets/{MOVING}@{before}"
    reader = storage.open(VIDEO)
    assert isinstance(reader, RangedReader) and reader.read(100) == old[:100]
    new = _bytes(2, SIZE)
    HfApi().upload_file(path_or_fileobj=new, path_in_repo=VIDEO, repo_id=MOVING, repo_type="dataset")
    assert server.repos[MOVING].sha != before  # main moved
    reader.seek(60_000)
    assert reader.read(1000) == old[60_000:61_000]  # still the first commit: never a mix of the two
    again = Storage(f"hf://datasets/{MOVING}@main", ReadOptions(retry=FAST_RETRY))
    assert again.open(VIDEO).read() == new


def test_hub_root_at_a_missing_revision_is_a_clear_error(hub, proxies):
    with pytest.raises(
        MissingFileError,
        match=rf"hf://datasets/{BLOBS}@nope: RevisionNotFoundError: .*check the "
        "repository id and the revision",
    ):
        Storage(f"hf://datasets/{BLOBS}@nope", ReadOptions(retry=FAST_RETRY))


def test_hub_dataset_with_full_validation_equals_local(hub, proxies, av1_root, tmp_path):
    source = ReadOptions(retry=FAST_RETRY, cache_dir=tmp_path / "cache", cache_limit="50mb", validate="full")
    remote = StreamingLeRobotDataset(root=f"hf://datasets/{AV1}", seed=3, return_uint8=True, read_options=source)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True))
    cached = _cached_objects(tmp_path / "cache")
    assert cached and all(Path(str(p) + ".verified").read_text().startswith("sha256:") for p in cached)


# --------------------------------------------------------------------------------------------------------------
# S3 (moto)
# --------------------------------------------------------------------------------------------------------------

BUCKET = "integrity"


@pytest.fixture(scope="module")
def bucket(s3_server) -> str:
    s3_server.create_bucket(BUCKET)
    return BUCKET


def test_s3_corrupted_download_is_detected_and_fetched_again(s3_server, bucket, make_fault_proxy, tmp_path):
    data = _bytes(3, SIZE)
    s3_server.put_bytes(bucket, "once/v.mp4", data)
    proxy = make_fault_proxy(s3_server.endpoint_url, _corrupt_first(1, "once/v.mp4"))
    storage = Storage(
        f"s3://{bucket}/once",
        ReadOptions(
            storage_options=s3_server.storage_options(proxy.url),
            retry=FAST_RETRY,
            cache_dir=tmp_path / "cache",
            cache_limit="10mb",
            read_buffer=PARTIAL_RANGES,
            validate="full",
        ),
    )
    assert storage.stat("v.mp4").digest == Digest("md5", hashlib.md5(data).hexdigest())
    with pytest.warns(
        RuntimeWarning,
        match=f"v.mp4: downloaded bytes do not match the published hash \\(expected "
        f"{hashlib.md5(data).hexdigest()}, got",
    ):
        path = storage.open("v.mp4")
    assert Path(path).read_bytes() == data and proxy.stats()["by_kind"] == {"corrupt": 1}


def test_s3_whole_object_range_checked_by_s3_is_retried(s3_server, bucket, make_fault_proxy, tmp_path):
    data = _bytes(8, SIZE)
    s3_server.put_bytes(bucket, "whole/v.mp4", data)
    proxy = make_fault_proxy(s3_server.endpoint_url, _corrupt_first(1, "whole/v.mp4"))
    storage = Storage(
        f"s3://{bucket}/whole",
        ReadOptions(
            storage_options=s3_server.storage_options(proxy.url),
            retry=FAST_RETRY,
            cache_dir=tmp_path / "cache",
            cache_limit="10mb",
            read_buffer=SMALL_BUFFER,
            validate="full",
        ),
    )
    path = storage.open("v.mp4")  # one request for the whole object: botocore's check fails, the retry succeeds
    assert Path(path).read_bytes() == data and proxy.stats()["by_kind"] == {"corrupt": 1}


def test_s3_persistent_corruption_fails_naming_the_file_and_both_hashes(s3_server, bucket, make_fault_proxy, tmp_path):
    data = _bytes(4, SIZE)
    s3_server.put_bytes(bucket, "always/v.mp4", data)
    proxy = make_fault_proxy(s3_server.endpoint_url, _corrupt_first(None, "always/v.mp4"))
    storage = Storage(
        f"s3://{bucket}/always",
        ReadOptions(
            storage_options=s3_server.storage_options(proxy.url),
            retry=FAST_RETRY,
            cache_dir=tmp_path / "cache",
            cache_limit="10mb",
            read_buffer=PARTIAL_RANGES,
            validate="full",
        ),
    )
    with pytest.warns(RuntimeWarning), pytest.raises(ChecksumMismatchError) as info:
        storage.open("v.mp4")
    message = str(info.value)
    assert message.startswith(f"s3://{bucket}/always/v.mp4: content does not match its published md5 after 2")
    assert f"expected {hashlib.md5(data).hexdigest()}, got {info.value.got}" in message
    assert "SSE-KMS" in message  # an md5 from an ETag may be no md5 at all: the error says when
    assert _cached_objects(tmp_path / "cache") == []


@pytest.mark.parametrize("new_size", [SIZE, SIZE + 5_000], ids=["same-size", "new-size"])
def test_s3_object_replaced_between_two_range_reads_is_an_error(s3_server, bucket, new_size):
    key = f"changed-{new_size}/v.mp4"
    old, new = _bytes(5, SIZE), _bytes(6, new_size)
    s3_server.put_bytes(bucket, key, old)
    storage = Storage(
        f"s3://{bucket}/changed-{new_size}",
        ReadOptions(storage_options=s3_server.storage_options(), retry=FAST_RETRY, read_buffer=SMALL_BUFFER),
    )
    reader = storage.open("v.mp4")
    assert reader.read(100) == old[:100]
    s3_server.put_bytes(bucket, key, new)
    reader.seek(60_000)
    with pytest.raises(
        FileChangedError,
        match=rf"s3://{bucket}/{key}: changed on the server during the epoch "
        r"\(first read: size 100000, ETag .*Pin the data to one version",
    ):
        reader.read(1000)
    fresh = storage.open("v.mp4")  # a reader opened now reads the new version, none of the old one's blocks
    assert fresh.read() == new


# --------------------------------------------------------------------------------------------------------------
# HTTP (RangeHTTPServer: ETag + If-Match, or neither)
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "etag, new_size, now",
    [
        (True, SIZE, "412 Precondition Failed"),  # same size: only the ETag can tell
        (True, SIZE + 5_000, "412 Precondition Failed"),
        (False, SIZE + 5_000, f"size {SIZE + 5_000}"),  # no ETag: the answer's Content-Range total tells
    ],
    ids=["etag-same-size", "etag-new-size", "no-etag-new-size"],
)
def test_http_file_replaced_between_two_range_reads_is_an_error(tmp_path, etag, new_size, now):
    old = _bytes(7, SIZE)
    (tmp_path / "v.mp4").write_bytes(old)
    with RangeHTTPServer(tmp_path, etag=etag) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
        reader = storage.open("v.mp4")
        assert reader.read(100) == old[:100]
        _replace(tmp_path / "v.mp4", _bytes(8, new_size))
        reader.seek(60_000)
        with pytest.raises(
            FileChangedError,
            match=rf"{server.url}/v\.mp4: changed on the server during the epoch "
            rf".*now: {now}.*re-run",
        ):
            reader.read(1000)
        assert server.stats()["/v.mp4"]["requests"] == 3  # HEAD, the first block, the refused one: no retries


def test_http_unchanged_file_reads_whole_with_if_match(tmp_path):
    data = _bytes(9, SIZE)
    (tmp_path / "v.mp4").write_bytes(data)
    with RangeHTTPServer(tmp_path) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
        assert storage.stat("v.mp4").etag == f'"{hashlib.md5(data).hexdigest()}"'
        assert storage.open("v.mp4").read() == data


# --------------------------------------------------------------------------------------------------------------
# A file's opening read (Storage.open with first_bytes / last_bytes): its version from the answer, no HEAD
# --------------------------------------------------------------------------------------------------------------

OPENING = 40_000
# 16 KiB blocks: the opening answer's whole blocks are kept, [0, 32768) of the first 40,000 bytes, [65536, SIZE) of
# the last 40,000 (the file's short last block included)
KEPT = {"first_bytes": (0, 32_768), "last_bytes": (65_536, SIZE)}


@pytest.mark.parametrize("etag", [True, False], ids=["etag", "no-etag"])
@pytest.mark.parametrize("wanted", ["first_bytes", "last_bytes"])
def test_http_opening_read_tells_the_version_with_the_bytes_and_guards_later_reads(tmp_path, etag, wanted):
    old = _bytes(10, SIZE)
    (tmp_path / "v.mp4").write_bytes(old)
    with RangeHTTPServer(tmp_path, etag=etag) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
        reader = storage.open("v.mp4", **{wanted: OPENING})
        start, end = KEPT[wanted]
        reader.seek(start)
        assert reader.read(end - start) == old[start:end]
        assert server.stats()["/v.mp4"]["requests"] == 1  # no HEAD: the one GET gave the version and the bytes
        assert reader.version == storage.stat("v.mp4")  # what a HEAD says (size, ETag, Last-Modified)
        _replace(tmp_path / "v.mp4", _bytes(11, SIZE + 5_000))
        reader.seek(40_000)  # a block the opening answer did not hold: If-Match (or the size) refuses the new file
        with pytest.raises(FileChangedError, match=r"v\.mp4: changed on the server during the epoch"):
            reader.read(1000)


@pytest.mark.parametrize("size", [0, 1_000], ids=["empty", "smaller-than-asked"])
@pytest.mark.parametrize("wanted", ["first_bytes", "last_bytes"])
def test_http_opening_read_of_a_small_or_empty_file(tmp_path, size, wanted):
    data = _bytes(12, size)
    (tmp_path / "v.mp4").write_bytes(data)
    with RangeHTTPServer(tmp_path) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
        reader = storage.open("v.mp4", **{wanted: OPENING})
        assert reader.size() == size
        assert reader.read() == data
        # the whole small file in the opening answer; an empty one is a 416, then a HEAD asks its size
        assert server.stats()["/v.mp4"]["requests"] == (1 if size else 2)


def test_s3_opening_read_names_the_version_a_listing_or_head_would(s3_server, bucket):
    key = "opening/v.mp4"
    old = _bytes(13, SIZE)
    s3_server.put_bytes(bucket, key, old)
    options = ReadOptions(storage_options=s3_server.storage_options(), retry=FAST_RETRY, read_buffer=SMALL_BUFFER)
    reader = Storage(f"s3://{bucket}/opening", options).open("v.mp4", last_bytes=OPENING)
    reader.seek(65_536)
    assert reader.read() == old[65_536:]
    # the same size, ETag and published md5 as a HEAD's: caches keyed by the version agree across processes
    assert reader.version == Storage(f"s3://{bucket}/opening", options).stat("v.mp4")
    assert reader.version.digest == Digest("md5", hashlib.md5(old).hexdigest())
    s3_server.put_bytes(bucket, key, _bytes(14, SIZE))
    reader.seek(0)
    with pytest.raises(FileChangedError, match=rf"s3://{bucket}/{key}: changed on the server during the epoch"):
        reader.read(1000)


def test_opening_read_retries_a_throttled_answer(make_fault_proxy, tmp_path):
    data = _bytes(15, SIZE)
    (tmp_path / "v.mp4").write_bytes(data)
    with RangeHTTPServer(tmp_path) as server:
        proxy = make_fault_proxy(server.url, [http_status(503)], match=lambda method, path: method == "GET")
        storage = Storage(proxy.url, ReadOptions(retry=FAST_RETRY, read_buffer=SMALL_BUFFER))
        reader = storage.open("v.mp4", first_bytes=OPENING)
        assert reader.read(32_768) == data[:32_768]
        assert storage.stats().retries == 1
