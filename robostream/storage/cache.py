"""An optional disk cache of whole remote files, shared by every process of this user on a node (the folder rule of
storage/cache_folder.py: only this user can write where the files are kept).

- Files are downloaded to a temporary name and renamed into place, so readers never see a partial file and
  concurrent writers of the same file are harmless (the last rename wins; the contents are identical).
- A reader pins a file with a shared `flock` on its pin file for as long as it uses it; eviction (least recently
  used first, by access time) takes an exclusive non-blocking lock and skips pinned files, so a file another
  DataLoader worker is decoding is never removed.
- `limit_bytes` bounds the cache. A file larger than the limit is an immediate error naming both sizes. When all
  the space is taken by pinned files the cache overshoots its limit rather than wait (waiting could deadlock
  workers that pin each other's files); the overshoot is at most the files in use.
- An entry is one version of a file (its key and a version token: a published hash, ETag or Last-Modified): a file
  replaced on the server is a new entry, never a stale hit of the same size. A file nothing but its size names is
  never cached (storage/store.py reads it by ranges).
- Bytes a server sent wrong in a way no check sees (an honest-looking answer with flipped bytes, no published hash
  to compare) stay in the cache after the server is fixed: an error about a cached copy names it and says to
  delete it (`described`).
- With an expected hash (validate="full"), a file is hashed while it is written and a copy that does not match is
  deleted (ChecksumMismatchError); a copy that matched is marked (`<object>.verified`) and trusted afterwards. A
  copy that entered without a check (an earlier validate="size" run) is hashed once at its first checked use, and
  deleted and downloaded again if it does not match. Corruption of a marked copy on this disk afterwards is not
  detected: delete the cache folder to have everything checked again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from robostream.storage.cache_folder import owned_folder
from robostream.storage.integrity import Digest, mismatch_error

UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like "20gb", "512 MiB"."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in UNITS | {"": 1}:
        raise ValueError(f"cache_limit={value!r}: expected bytes or a size like '20gb' or '512MiB'")
    return int(float(match.group(1)) * UNITS.get(match.group(2).lower(), 1))


class CachedPath(str):
    """A cached file's path that keeps the file pinned while this object is referenced."""

    pin: object

    def __new__(cls, path: str, pin: object) -> CachedPath:
        obj = super().__new__(cls, path)
        obj.pin = pin
        return obj


class Writable(Protocol):
    def write(self, data: bytes) -> int: ...


class _HashingSink:
    """The writable a download writes to: counts bytes and feeds the hasher (if any) on the way to the file."""

    def __init__(self, out: BinaryIO, hasher: Any) -> None:
        self._out, self.hasher = out, hasher

    def write(self, data: bytes) -> int:
        if self.hasher is not None:
            self.hasher.update(data)
        return self._out.write(data)


def described(name: str, source: object) -> str:
    """`name` (a file's location) for messages about bytes read from `source`: when `source` is a disk-cache copy,
    with the copy's path and what to do if the server's file is sound (the copy may hold bytes it sent wrong)."""
    if not isinstance(source, CachedPath):
        return name
    return (
        f"{name} (read from its copy in the node's disk cache, {source}: if the server's file is sound, delete "
        "that copy and run again)"
    )


def _hash_file(path: Path, expected: Digest, size: int) -> str:
    hasher = expected.hasher(size)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


class DiskCache:
    """Whole-file cache under `directory` holding at most `limit` bytes (see the module docstring)."""

    def __init__(self, directory: str | Path, limit: int | str) -> None:
        self.limit = parse_size(limit)
        if self.limit <= 0:
            raise ValueError(f"cache_limit must be positive, got {limit!r}")
        self.directory = owned_folder(directory, "disk cache")
        (self.directory / "objects").mkdir(exist_ok=True)
        self._lock_path = self.directory / ".lock"

    def _object(self, key: str, version: str = "") -> Path:
        digest = hashlib.sha256((f"{key}\0{version}" if version else key).encode()).hexdigest()
        suffix = Path(key).suffix if len(Path(key).suffix) <= 10 else ""
        return self.directory / "objects" / digest[:2] / f"{digest}{suffix}"

    def _pin(self, path: Path) -> BinaryIO:
        handle = open(path.with_name(path.name + ".pin"), "a+b")  # noqa: SIM115 - lives as long as the pin
        fcntl.flock(handle, fcntl.LOCK_SH)
        return handle

    def fetch(
        self,
        key: str,
        size: int,
        download: Callable[[Writable], None],
        *,
        version: str = "",
        expected: Digest | None = None,
    ) -> CachedPath:
        """The cached local copy of `key` (e.g. a URL) at `version` (e.g. its ETag; "" if unknown), `size` bytes,
        downloading it with `download(out)`, which writes the content to `out`.

        expected: the content's published hash; a copy that does not match is deleted and ChecksumMismatchError
        raised (naming `key` and both hashes). None: sizes only.
        """
        if size > self.limit:
            raise ValueError(
                f"{key}: {size} bytes do not fit cache_limit={self.limit} bytes; raise cache_limit "
                "above the largest data or video file, or turn the disk cache off"
            )
        target = self._object(key, version)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            hit = target.is_file() and target.stat().st_size == size
            if hit and (expected is None or self._verified(target) == str(expected)):
                os.utime(target)
                return CachedPath(str(target), self._pin(target))
            pin = self._pin(target) if hit else None
        if pin is not None and expected is not None:  # cached unchecked: hash it once (pinned, outside the lock)
            if _hash_file(target, expected, size) == expected.hexdigest:
                with self._locked():
                    _marker(target).write_text(str(expected))
                    os.utime(target)
                return CachedPath(str(target), pin)
            pin.close()
            with self._locked():  # a bad copy: gone, then downloaded again below
                target.unlink(missing_ok=True)
                _marker(target).unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as out:
                sink = _HashingSink(out, expected.hasher(size) if expected is not None else None)
                download(sink)
            got = os.path.getsize(tmp)
            if got != size:
                raise OSError(f"{key}: downloaded {got} bytes, expected {size}")
            if expected is not None and (digest := sink.hasher.hexdigest()) != expected.hexdigest:
                raise mismatch_error(key, expected, digest, attempts=1)
            with self._locked():
                self._evict(size, keep=target)
                os.replace(tmp, target)
                if expected is not None:
                    _marker(target).write_text(str(expected))
                else:
                    _marker(target).unlink(missing_ok=True)
                return CachedPath(str(target), self._pin(target))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @staticmethod
    def _verified(path: Path) -> str | None:
        """The hash a cached copy was checked against on its way in (None: never checked)."""
        try:
            return _marker(path).read_text()
        except FileNotFoundError:
            return None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The cache-wide lock (across processes) around lookups, admissions and evictions."""
        with open(self._lock_path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def usage(self) -> int:
        return sum(p.stat().st_size for p in self._objects())

    def _objects(self) -> list[Path]:
        return [
            p
            for p in (self.directory / "objects").glob("*/*")
            if not p.name.endswith((".pin", ".verified")) and not p.name.startswith(".partial-")
        ]

    def _evict(self, incoming: int, keep: Path) -> None:
        """Remove least recently used, unpinned files until `incoming` more bytes fit (lock held by the caller)."""
        objects = sorted(self._objects(), key=lambda p: p.stat().st_mtime_ns)  # fetch() touches on every hit
        used = sum(p.stat().st_size for p in objects)
        for path in objects:
            if used + incoming <= self.limit:
                return
            if path == keep:
                continue
            pin_path = path.with_name(path.name + ".pin")
            with open(pin_path, "a+b") as pin:
                try:
                    fcntl.flock(pin, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use by a reader: never evicted
                size = path.stat().st_size
                path.unlink()
                _marker(path).unlink(missing_ok=True)
                pin_path.unlink()
                used -= size
