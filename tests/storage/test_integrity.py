"""The pure integrity rules (storage/integrity.py) and the disk cache's hash check, without a network."""

import hashlib
from pathlib import Path

import pytest

from robostream.errors import ChecksumMismatchError, FileChangedError, IntegrityError
from robostream.storage.blocks import BlockCache
from robostream.storage.cache import DiskCache
from robostream.storage.integrity import (
    Digest,
    FileVersion,
    check_range_answer,
    check_validate,
    digest_from_info,
    md5_of_etag,
    strong_etag,
)
from robostream.storage.retry import RetryPolicy, call_with_retries

SHA = "a" * 64
MD5 = "0123456789abcdef0123456789abcdef"


def _sha256(data: bytes) -> Digest:
    return Digest("sha256", hashlib.sha256(data).hexdigest())


def test_git_blob_hash_matches_git():
    # `git hash-object` of an empty file and of "hello\n"
    assert Digest("git-sha1", "").hasher(0).hexdigest() == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    hasher = Digest("git-sha1", "").hasher(6)
    hasher.update(b"hello\n")
    assert hasher.hexdigest() == "ce013625030ba8dba906f756967f9e9ca394464a"


@pytest.mark.parametrize(
    "protocol, info, expected",
    [
        # Hub LFS/Xet file: the content's sha256, not the blob id (which hashes the pointer file)
        (
            "hf",
            {"size": 5, "blob_id": "b" * 40, "lfs": {"sha256": SHA, "size": 5, "pointer_size": 130}},
            Digest("sha256", SHA),
        ),
        ("hf", {"size": 5, "blob_id": "B" * 40, "lfs": None}, Digest("git-sha1", "b" * 40)),
        ("hf", {"size": 5}, None),
        ("s3", {"size": 5, "ETag": f'"{MD5}"'}, Digest("md5", MD5)),
        ("s3", {"size": 5, "ETag": f'"{MD5}-3"'}, None),  # multipart: hashes of parts, not of the file
        ("s3", {"size": 5, "ETag": ""}, None),
        ("https", {"size": 5, "ETag": f'"{MD5}"'}, None),  # an HTTP ETag is opaque
    ],
)
def test_published_hashes(protocol, info, expected):
    assert digest_from_info(protocol, info) == expected


def test_etag_helpers():
    assert md5_of_etag(f'"{MD5}"') == MD5 and md5_of_etag(f'"{MD5}-2"') is None and md5_of_etag(None) is None
    assert strong_etag('"x"') == '"x"' and strong_etag('W/"x"') is None and strong_etag(None) is None


def test_validate_choices_are_checked(tmp_path):
    from robostream.storage.options import ReadOptions

    check_validate("size", cached=False)
    check_validate("full", cached=True)
    with pytest.raises(ValueError, match=r"validate='sha'.*\('size', 'full'\)"):
        ReadOptions(validate="sha")
    with pytest.raises(
        ValueError, match="validate='full' hashes whole files as they enter the disk cache: pass cache_dir="
    ):
        ReadOptions(validate="full")
    assert ReadOptions(validate="full", cache_dir=tmp_path, cache_limit="1gb").validate == "full"


V = FileVersion(1000, '"v1"')


@pytest.mark.parametrize(
    "answer, error, match",
    [
        ((206, "bytes 0-99/1000", '"v1"', 100), None, None),
        ((None, None, None, 100), None, None),  # a client that reports nothing: the length is still checked
        ((200, None, '"v1"', 1000), None, None),  # the whole file asked and sent with 200
        ((206, "bytes 0-99/1200", '"v1"', 100), FileChangedError, r"now: size 1200"),
        ((206, "bytes 0-99/1000", '"v2"', 100), FileChangedError, r'ETag "v1"; now: ETag "v2"'),
        ((416, "bytes */900", None, 0), FileChangedError, r"now: size 900"),
        ((416, "bytes */1000", None, 0), FileChangedError, "416 Range Not Satisfiable for bytes 0-99, inside the 1000"),
        ((206, "bytes 100-199/1000", '"v1"', 100), ValueError, "asked for bytes 0-99, the server sent bytes 100-199"),
        ((206, "bytes 0-98/1000", '"v1"', 100), ValueError, "the server sent bytes 0-98"),
        ((206, None, '"v1"', 100), ValueError, "206 but Content-Range None"),
        ((206, "bytes */1000", '"v1"', 100), ValueError, "206 but Content-Range 'bytes \\*/1000'"),
        ((200, None, '"v1"', 1000), ValueError, "ignored the byte range"),  # asked for 100 bytes (see below)
        ((206, "bytes 0-99/1000", '"v1"', 60), ConnectionError, "short read: 60 of 100"),
    ],
)
def test_range_answers(answer, error, match):
    status, content_range, etag, nbytes = answer
    end = 1000 if error is None and status == 200 else 100
    if error is None:
        check_range_answer("s3://b/f.mp4", V, 0, end, status, content_range, etag, nbytes)
        return
    with pytest.raises(error, match=match) as info:
        check_range_answer("s3://b/f.mp4", V, 0, end, status, content_range, etag, nbytes)
    if error is FileChangedError:
        message = str(info.value)
        assert message.startswith("s3://b/f.mp4: changed on the server during the epoch")
        assert "Pin the data to one version" in message and "re-run" in message


def test_integrity_errors_pass_through_the_retry_loop_untouched():
    calls = []

    def read():
        calls.append(1)
        raise FileChangedError("f: changed")

    with pytest.raises(FileChangedError, match="^f: changed$"):
        call_with_retries(read, "f", RetryPolicy(max_attempts=5, base_delay_s=0), sleep=lambda s: None)
    assert calls == [1]


def _writer(data: bytes):
    return lambda out: out.write(data)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / "objects").rglob("*") if p.is_file() and not p.name.endswith(".pin"))


def test_a_download_that_does_not_match_its_hash_is_deleted_with_both_hashes_named(tmp_path):
    cache = DiskCache(tmp_path / "c", limit=10_000)
    good, bad = b"x" * 100, b"x" * 99 + b"y"
    with pytest.raises(ChecksumMismatchError) as info:
        cache.fetch("hf://datasets/o/r@sha/v.mp4", 100, _writer(bad), expected=_sha256(good))
    message = str(info.value)
    assert message.startswith("hf://datasets/o/r@sha/v.mp4: content does not match its published sha256")
    assert f"expected {_sha256(good).hexdigest}, got {hashlib.sha256(bad).hexdigest()}" in message
    assert info.value.got == hashlib.sha256(bad).hexdigest() and isinstance(info.value, IntegrityError)
    assert _leftovers(tmp_path / "c") == []  # no cached copy, no partial file
    path = cache.fetch("hf://datasets/o/r@sha/v.mp4", 100, _writer(good), expected=_sha256(good))
    assert Path(path).read_bytes() == good
    assert Path(path + ".verified").read_text() == str(_sha256(good))


def test_a_copy_cached_unchecked_is_hashed_at_its_first_checked_use(tmp_path):
    """A copy that entered without a check (validate="size") and is corrupt is found at the first validate="full"
    use, deleted and downloaded again; a checked copy is trusted afterwards (no download, no re-hash needed)."""
    cache = DiskCache(tmp_path / "c", limit=10_000)
    good, bad = bytes(range(200)), bytes(range(199)) + b"\0"
    downloads = []

    def download(data):
        def write(out):
            downloads.append(data)
            out.write(data)

        return write

    path = cache.fetch("s3://b/v.mp4", 200, download(bad), version='"e1"')  # size only: admitted
    assert Path(path).read_bytes() == bad
    del path
    path = cache.fetch("s3://b/v.mp4", 200, download(good), version='"e1"', expected=_sha256(good))
    assert Path(path).read_bytes() == good and downloads == [bad, good]
    del path
    path = cache.fetch("s3://b/v.mp4", 200, download(bad), version='"e1"', expected=_sha256(good))
    assert Path(path).read_bytes() == good and downloads == [bad, good]  # verified copy: a hit


def test_a_new_version_is_a_new_entry_never_a_stale_hit(tmp_path):
    cache = DiskCache(tmp_path / "c", limit=10_000)
    first = cache.fetch("https://h/v.mp4", 3, _writer(b"old"), version='"1"')
    second = cache.fetch("https://h/v.mp4", 3, _writer(b"new"), version='"2"')
    assert Path(first).read_bytes() == b"old" and Path(second).read_bytes() == b"new" and first != second
    assert first.endswith(".mp4") and second.endswith(".mp4")  # decoders still see the file type


def test_discarded_blocks_are_fetched_again():
    blocks = BlockCache(1 << 20)
    fetched = []

    def fetch(value):
        def run():
            fetched.append(value)
            return value

        return run

    assert blocks.get(("f", 0), fetch(b"bad")) == b"bad"
    blocks.get(("g", 0), fetch(b"other"))
    blocks.discard("f")
    assert blocks.get(("f", 0), fetch(b"good")) == b"good"
    assert blocks.get(("g", 0), fetch(b"never")) == b"other"
    assert fetched == [b"bad", b"other", b"good"] and blocks.resident_bytes == len(b"good") + len(b"other")
