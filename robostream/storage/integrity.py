"""What a remote file's bytes must be: its version (size, ETag) and, where the host publishes one, a hash of it.

Two checks use this, both pure functions here, applied by `storage/store.py` and `storage/cache.py`:

- Every range read of a file must come from the version its first look-up saw. S3 and HTTP range requests carry
  `If-Match: <etag>` and each answer's total size (`Content-Range`) and ETag are compared with that version; a
  412 or a difference is a `FileChangedError`, never bytes of two versions mixed in one file. Hub roots are pinned
  to one commit instead (files of a commit never change), so there is nothing to compare.
- With `validate="full"`, whole files entering the disk cache are hashed while they are written and compared with
  the hash the host publishes: the Hub's sha256 of LFS/Xet files or git blob sha1 of small files, an S3 ETag when
  it is a plain MD5 (single-part uploads; a multipart ETag has a "-" and hashes parts, not the file). Files with no
  published hash (plain HTTP, multipart S3 objects) are checked by size only. Hashing costs about a second of CPU
  per GB (sha256), once per file entering the cache; range reads without the cache are never hashed (a part of
  a file cannot be compared with the hash of the whole).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

from robostream.errors import ChecksumMismatchError, FileChangedError

Validate = Literal["size", "full"]
VALIDATE_CHOICES: tuple[str, ...] = ("size", "full")
Algorithm = Literal["sha256", "git-sha1", "md5"]
_HEX = {"sha256": 64, "git-sha1": 40, "md5": 32}
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$")


def check_validate(validate: str, cached: bool = True) -> None:
    """Fail now, naming the value, for a `validate=` that is not a choice or that cannot be honoured (cached: a
    disk cache is configured)."""
    if validate not in VALIDATE_CHOICES:
        raise ValueError(f"validate={validate!r}: expected one of {VALIDATE_CHOICES}")
    if validate == "full" and not cached:
        raise ValueError(
            "validate='full' hashes whole files as they enter the disk cache: pass cache_dir= and "
            "cache_limit= too (range reads cannot be compared with the hash of a whole file)"
        )


@dataclass(frozen=True)
class Digest:
    """A published hash of a file's whole content: `algorithm` and lowercase hex."""

    algorithm: Algorithm
    hexdigest: str

    def hasher(self, size: int) -> Any:
        """A hashlib object to feed the content to (git's blob hash starts with the header "blob <size>\\0")."""
        if self.algorithm == "git-sha1":
            hasher = hashlib.sha1()
            hasher.update(b"blob %d\0" % size)
            return hasher
        return hashlib.new(self.algorithm)

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hexdigest}"


@dataclass(frozen=True)
class FileVersion:
    """What a remote file was when first looked up: size in bytes, the ETag as the server sent it (quotes kept;
    None: none given), its published content hash (None: none published) and its Last-Modified header (None: none
    given; HTTP servers without ETags often send it)."""

    size: int
    etag: str | None = None
    digest: Digest | None = None
    last_modified: str | None = None

    @property
    def token(self) -> str:
        """What tells this version from another of the same size: the published hash, else the ETag, else
        Last-Modified (one-second resolution: a same-size replacement within the second it was read is not told
        apart); "" when nothing does (the caller must name the content another way, e.g. by hashing it)."""
        if self.digest is not None:
            return str(self.digest)
        if self.etag:
            return self.etag
        return f"Last-Modified: {self.last_modified}" if self.last_modified else ""


def _hex(value: Any, algorithm: Algorithm) -> str | None:
    text = str(value or "").strip().strip('"').lower()
    return text if re.fullmatch(f"[0-9a-f]{{{_HEX[algorithm]}}}", text) else None


def md5_of_etag(etag: str | None) -> str | None:
    """The MD5 an S3 ETag is, for single-part uploads ("<32 hex>"); None for multipart ("<hex>-<parts>") and for
    anything else. Caveat: objects encrypted with SSE-KMS or SSE-C have 32-hex ETags that are NOT the MD5 of the
    content and cannot be told apart from an ETag alone; validate="full" fails on them (the error says so)."""
    return _hex(etag, "md5")


def strong_etag(etag: str | None) -> str | None:
    """The ETag to send in If-Match, or None: weak ETags (W/"...") never match under If-Match's strong comparison."""
    if not etag or etag.strip().startswith("W/"):
        return None
    return etag.strip()


def same_etag(a: str, b: str) -> bool:
    return a.strip().strip('"') == b.strip().strip('"')


def digest_from_info(protocol: str, info: dict[str, Any]) -> Digest | None:
    """The content hash a filesystem's `info()` entry publishes, if any.

    hf: "lfs" {"sha256", "size"} for LFS/Xet files (the "blob_id" of those hashes the pointer file, not the
    content), else "blob_id" (git blob sha1 of the content). s3: "ETag" when it is a plain MD5.
    """
    if protocol == "hf":
        lfs = info.get("lfs")
        if lfs:
            sha = _hex(lfs.get("sha256") or lfs.get("oid"), "sha256")
            return Digest("sha256", sha) if sha else None
        blob = _hex(info.get("blob_id"), "git-sha1")
        return Digest("git-sha1", blob) if blob else None
    if protocol in ("s3", "s3a"):
        md5 = md5_of_etag(info.get("ETag") or info.get("etag"))
        return Digest("md5", md5) if md5 else None
    return None


def mismatch_error(name: str, expected: Digest, got: str, attempts: int) -> ChecksumMismatchError:
    hint = (
        (
            " An S3 ETag is the MD5 of the content only for single-part uploads without SSE-KMS/SSE-C encryption:"
            " for encrypted buckets use validate='size'."
        )
        if expected.algorithm == "md5"
        else ""
    )
    return ChecksumMismatchError(
        f"{name}: content does not match its published {expected.algorithm} after {attempts} download(s) "
        f"(expected {expected.hexdigest}, got {got}); the cached copy was deleted. The bytes were corrupted on the "
        f"way (a proxy, the network, the server) or the listing is wrong: re-run; if it persists, report it to the "
        f"dataset's host.{hint}",
        expected=expected.hexdigest,
        got=got,
    )


def changed_error(name: str, version: FileVersion, now: str) -> FileChangedError:
    first = f"size {version.size}" + (f", ETag {version.etag}" if version.etag else "")
    return FileChangedError(
        f"{name}: changed on the server during the epoch (first read: {first}; now: {now}); reading on would mix "
        "bytes of two versions of the file. Pin the data to one version (a Hub commit: revision=<sha> or "
        "hf://...@<sha>; objects that are never overwritten) or re-run once the upload has finished"
    )


def check_range_answer(
    name: str,
    version: FileVersion,
    start: int,
    end: int,
    status: int | None,
    content_range: str | None,
    etag: str | None,
    nbytes: int,
) -> None:
    """Raise unless an answer to a request for bytes [start, end) of `version` is exactly those bytes.

    status: the HTTP status (None: the client does not say, e.g. the Hub's filesystem); content_range, etag: the
    answer's headers (None: absent). A changed total size or ETag, or a 416 for a range inside the size first
    seen (the file shrank) -> FileChangedError; a 206 whose Content-Range is not the range asked for (a proxy or
    server bug: those bytes belong elsewhere in the file), or without one, or a whole file instead of a range ->
    ValueError (not retried: the server would answer the same); a short body -> ConnectionError (transient:
    retried). Nothing that fails here is kept in a cache.
    """
    match = _CONTENT_RANGE.match(content_range) if content_range else None
    if match and match.group(3) != "*" and int(match.group(3)) != version.size:
        raise changed_error(name, version, f"size {match.group(3)}")
    if etag and version.etag and not same_etag(etag, version.etag):
        raise changed_error(name, version, f"ETag {etag}")
    if status == 416:
        raise changed_error(
            name,
            version,
            f"416 Range Not Satisfiable for bytes {start}-{end - 1}, inside the {version.size} bytes first seen",
        )
    if status == 206:
        if match is None or match.group(1) is None:
            raise ValueError(
                f"the server answered bytes {start}-{end - 1} with 206 but Content-Range "
                f"{content_range!r}; without it the bytes cannot be placed in the file"
            )
        got = int(match.group(1)), int(match.group(2)) + 1
        if got != (start, end):
            raise ValueError(
                f"asked for bytes {start}-{end - 1}, the server sent bytes {got[0]}-{got[1] - 1} "
                f"(Content-Range {content_range!r}); a server or proxy that answers the wrong range "
                "would give wrong frames: fix or bypass it"
            )
    whole = status == 200 and start == 0 and end == version.size  # a server may answer a full range with 200
    if (status == 200 and not whole) or nbytes > end - start:
        raise ValueError(
            f"the server ignored the byte range and sent {nbytes} bytes; ranged reads need a server "
            "that supports HTTP Range requests"
        )
    if nbytes < end - start:  # a short body must never pass as the file's content
        raise ConnectionError(f"short read: {nbytes} of {end - start} bytes")


def opening_span(
    name: str, *, first_bytes: int, last_bytes: int, status: int | None, content_range: str | None, nbytes: int
) -> tuple[int, int, int] | None:
    """(the file's size, the first byte sent, the byte after the last) of the answer to a file's opening request, a
    GET of its first
    `first_bytes` or last `last_bytes` bytes sent before its version is known (no If-Match): a 206's Content-Range
    names both, a 200 is the whole file (smaller than asked for). None for a 416: no byte to send (an empty file),
    the caller asks for the size. A span other than the one asked for is a ValueError, as `check_range_answer`'s."""
    if status == 416:
        return None
    if status == 200:
        return nbytes, 0, nbytes
    match = _CONTENT_RANGE.match(content_range) if content_range else None
    if status != 206 or match is None or match.group(1) is None or match.group(3) == "*":
        raise ValueError(
            f"{name}: asked for a byte range, the server answered {status} with Content-Range {content_range!r}; "
            "ranged reads need a server that answers byte ranges with 206 and the file's size"
        )
    size, start, stop = int(match.group(3)), int(match.group(1)), int(match.group(2)) + 1
    wanted = (0, min(first_bytes, size)) if first_bytes else (max(0, size - last_bytes), size)
    if (start, stop) != wanted:
        raise ValueError(
            f"{name}: asked for bytes {wanted[0]}-{wanted[1] - 1} of {size}, the server sent bytes {start}-{stop - 1} "
            f"(Content-Range {content_range!r}); a server or proxy that answers the wrong range would give wrong "
            "frames: fix or bypass it"
        )
    return size, start, stop
