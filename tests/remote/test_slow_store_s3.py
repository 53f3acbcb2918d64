"""The slow store's S3 dialect (S3RangeServer): s3fs/botocore and pyarrow's S3 (the AWS SDK) list, stat and read
through it the local bytes, its answers follow the S3 protocol the Rust object_store crate (lance) parses, and
robostream reads a dataset from it as from the local folder, with several requests in flight under latency.

The buckets are subfolders of the served root: a pytest temporary folder's parent, its name the bucket.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET

import pytest
import requests

from robostream.testing.s3_dialect import S3_NAMESPACE, S3RangeServer

from .servers import DATA_FILES, s3_filesystem
from .test_slow_store import _batches, _same

pytestmark = pytest.mark.timeout(120)
NS = {"s3": S3_NAMESPACE}


@pytest.fixture(scope="module")
def data_store(remote_data_dir):
    """S3RangeServer with the package's data folder as a bucket, listing pages of 2 entries."""
    with S3RangeServer(remote_data_dir.parent, page_size=2) as store:
        yield store, remote_data_dir.name


def test_s3fs_lists_stats_and_reads_ranges_as_on_disk(data_store, remote_data_dir):
    store, bucket = data_store
    store.reset_stats()
    fs = s3_filesystem(store.storage_options())
    assert store.s3_url(bucket) == f"s3://{bucket}"
    assert fs.find(bucket) == sorted(f"{bucket}/{name}" for name in DATA_FILES)  # 5 keys in pages of 2
    assert store.stats()[f"/{bucket}"]["requests"] == 3
    assert fs.ls(bucket, detail=False) == sorted(
        f"{bucket}/{name}" for name in ("blob.bin", "small.txt", "empty.bin", "nested", "with space")
    )
    fs.invalidate_cache()
    for name, size in DATA_FILES.items():
        data = (remote_data_dir / name).read_bytes()
        info = fs.info(f"{bucket}/{name}")  # HeadObject
        assert info["size"] == size and info["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert info["LastModified"].timestamp() == pytest.approx((remote_data_dir / name).stat().st_mtime, abs=1)
        assert fs.cat_file(f"{bucket}/{name}") == data
        if size > 10:
            assert fs.cat_file(f"{bucket}/{name}", start=3, end=size - 2) == data[3:-2]
    assert fs.isdir(f"{bucket}/nested/dir") and not fs.exists(f"{bucket}/nested/none")


def test_pyarrow_s3_lists_and_reads_as_on_disk(data_store, remote_data_dir):
    pafs = pytest.importorskip("pyarrow.fs")
    store, bucket = data_store
    options = store.object_store_options()
    s3 = pafs.S3FileSystem(
        endpoint_override=store.url,
        scheme="http",
        region=options["aws_region"],
        access_key=options["aws_access_key_id"],
        secret_key=options["aws_secret_access_key"],
    )
    files = s3.get_file_info(pafs.FileSelector(bucket, recursive=True))
    assert {i.path: i.size for i in files if i.type == pafs.FileType.File} == {
        f"{bucket}/{name}": size for name, size in DATA_FILES.items()
    }
    with s3.open_input_file(f"{bucket}/nested/dir/chunk-000.bin") as handle:
        handle.seek(1000)
        assert handle.read(5000) == (remote_data_dir / "nested/dir/chunk-000.bin").read_bytes()[1000:6000]


def _list(store, bucket, **query):
    answer = requests.get(f"{store.url}/{bucket}", params={"list-type": "2", **query}, timeout=30)
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/xml"
    result = ET.fromstring(answer.content)
    assert result.tag == f"{{{S3_NAMESPACE}}}ListBucketResult"
    return result


def test_list_objects_v2_pages_prefixes_and_conditional_gets_follow_s3(data_store):
    """What object_store sends (path-style, list-type=2 with prefix, delimiter, continuation-token, start-after,
    If-Match/If-None-Match) and the fields it parses."""
    store, bucket = data_store
    keys, prefixes, token = [], [], None
    while True:
        page = _list(store, bucket, delimiter="/", **({"continuation-token": token} if token else {}))
        assert int(page.findtext("s3:KeyCount", namespaces=NS)) <= 2
        keys += [c.findtext("s3:Key", namespaces=NS) for c in page.findall("s3:Contents", NS)]
        prefixes += [p.findtext("s3:Prefix", namespaces=NS) for p in page.findall("s3:CommonPrefixes", NS)]
        token = page.findtext("s3:NextContinuationToken", namespaces=NS)
        if page.findtext("s3:IsTruncated", namespaces=NS) == "false":
            assert token is None
            break
    assert keys == ["blob.bin", "empty.bin", "small.txt"] and prefixes == ["nested/", "with space/"]
    page = _list(store, bucket, prefix="nested/", **{"start-after": "a", "max-keys": "1000"})
    (entry,) = page.findall("s3:Contents", NS)
    assert entry.findtext("s3:Key", namespaces=NS) == "nested/dir/chunk-000.bin"
    assert entry.findtext("s3:Size", namespaces=NS) == str(DATA_FILES["nested/dir/chunk-000.bin"])
    assert entry.findtext("s3:LastModified", namespaces=NS).endswith("Z")
    assert entry.findtext("s3:StorageClass", namespaces=NS) == "STANDARD"
    etag = entry.findtext("s3:ETag", namespaces=NS)
    assert [
        c.findtext("s3:Key", namespaces=NS)
        for c in _list(store, bucket, **{"start-after": "small.txt"}).findall("s3:Contents", NS)
    ] == ["with space/a b.bin"]
    encoded = _list(store, bucket, prefix="with ", **{"encoding-type": "url"})
    assert encoded.findtext("s3:Contents/s3:Key", namespaces=NS) == "with%20space/a%20b.bin"

    url = f"{store.url}/{bucket}/nested/dir/chunk-000.bin"
    head = requests.head(url, timeout=30)
    assert head.headers["ETag"] == etag and head.headers["Last-Modified"].endswith("GMT")
    ranged = requests.get(url, headers={"Range": "bytes=10-19", "If-Match": etag}, timeout=30)
    assert ranged.status_code == 206 and ranged.headers["Content-Range"] == f"bytes 10-19/{70_001}"
    assert requests.get(url, headers={"If-None-Match": etag}, timeout=30).status_code == 304
    refused = requests.get(url, headers={"If-Match": '"other"'}, timeout=30)
    assert refused.status_code == 412 and ET.fromstring(refused.content).findtext("Code") == "PreconditionFailed"
    past_end = requests.get(url, headers={"Range": "bytes=80000-"}, timeout=30)
    assert past_end.status_code == 416 and ET.fromstring(past_end.content).findtext("Code") == "InvalidRange"
    assert requests.head(f"{store.url}/{bucket}", timeout=30).status_code == 200  # HeadBucket


def test_a_missing_key_or_bucket_is_an_s3_error_naming_it(data_store):
    from robostream.errors import MissingFileError
    from robostream.storage.options import ReadOptions
    from robostream.storage.store import Storage

    store, bucket = data_store
    answer = requests.get(f"{store.url}/{bucket}/meta/missing.json", timeout=30)
    error = ET.fromstring(answer.content)
    assert answer.status_code == 404 and answer.headers["Content-Type"] == "application/xml"
    assert error.findtext("Code") == "NoSuchKey" and error.findtext("Key") == "meta/missing.json"
    assert requests.head(f"{store.url}/{bucket}/meta/missing.json", timeout=30).status_code == 404
    error = ET.fromstring(requests.get(f"{store.url}/no-such-bucket?list-type=2", timeout=30).content)
    assert error.findtext("Code") == "NoSuchBucket" and error.findtext("BucketName") == "no-such-bucket"
    storage = Storage(store.s3_url(bucket), ReadOptions(storage_options=store.storage_options()))
    with pytest.raises(MissingFileError, match="meta/missing.json"):
        storage.open("meta/missing.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        s3_filesystem(store.storage_options()).cat_file(f"{bucket}/meta/missing.json")
    with pytest.raises(ValueError, match="no-such-bucket"):
        store.s3_url("no-such-bucket")


def test_streaming_epoch_from_the_s3_store_with_latency_equals_the_local_one(av1_root):
    """robostream over s3://<bucket> (s3fs, ranged GETs pinned by If-Match): the local epoch batch for batch, the
    listing and requests through the same latency and admission, several requests in flight at once."""
    from robostream import ReadOptions

    _, local = _batches(av1_root)
    with S3RangeServer(av1_root.parent, latency_s=0.03) as store:
        loader, remote = _batches(
            store.s3_url(av1_root.name),
            read_options=ReadOptions(storage_options=store.storage_options(), read_buffer="1mb"),
        )
        summary = store.summary(1.0)
        counts = loader.streaming_dataset.frame_counts()
    assert _same(remote, local)
    assert summary["in_flight_max"] > 1 and summary["bytes"] > 0
    assert counts["evicted_unread"] == 0 and counts["read_ahead_errors"] == 0


def test_map_style_samples_from_the_s3_store_equal_the_local_ones(av1_root):
    import torch

    from robostream import LeRobotDataset, ReadOptions

    local = LeRobotDataset(root=av1_root, return_uint8=True)
    with S3RangeServer(av1_root.parent, latency_s=0.01) as store:
        remote = LeRobotDataset(
            root=store.s3_url(av1_root.name),
            return_uint8=True,
            read_options=ReadOptions(storage_options=store.storage_options()),
        )
        for i in (0, 17, len(local) - 1):
            a, b = remote[i], local[i]
            assert a.keys() == b.keys()
            assert all(torch.equal(a[k], b[k]) if isinstance(b[k], torch.Tensor) else a[k] == b[k] for k in b)
        assert store.summary(1.0)["requests"] > 0


def test_a_bucket_may_be_a_link_to_a_dataset_folder(tmp_path, remote_data_dir):
    """The bench serves a dataset folder as a bucket by linking it into an empty root; keys never leave it."""
    (tmp_path / "ds").symlink_to(remote_data_dir, target_is_directory=True)
    with S3RangeServer(tmp_path) as store:
        fs = s3_filesystem(store.storage_options())
        assert fs.find("ds") == sorted(f"ds/{name}" for name in DATA_FILES)
        assert fs.cat_file("ds/small.txt") == (remote_data_dir / "small.txt").read_bytes()
        assert requests.get(f"{store.url}/ds/%2E%2E/ds/small.txt", timeout=30).status_code == 404
