"""Where a dataset's bytes come from: a local folder or an fsspec URL (hf://, s3://, http(s)://, file://).

`Storage` reads small files whole and hands out `RangedReader`s, seekable file objects that fetch only the byte
ranges a reader asks for (parquet footers and row groups, mp4 index and frame spans), in blocks, with retries,
and count the bytes they fetch. Local roots keep the plain-path fast path.
"""

from __future__ import annotations

import io
import os
import posixpath
import threading
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import fsspec

from robostream.errors import MissingFileError
from robostream.process_local import ProcessLocal
from robostream.storage.paths import check_relative, local_path
from robostream.storage.blocks import BlockCache
from robostream.storage.cache import DiskCache
from robostream.storage.retry import RetryPolicy, call_with_retries

# Bytes fetched per range request (at most). Live pieces read scattered spans of their files, so each live piece
# and camera keeps about one block busy: small blocks keep that working set small; 256 KiB still holds a few
# look-ahead frames of a 256x256 AV1 camera (~15 KiB each) per request.
BLOCK_SIZE = 256 << 10
MIN_BLOCK_SIZE = 16 << 10
DEFAULT_BLOCK_BUDGET = 128 << 20  # fetched bytes kept per process (reads + prefetch)


def _default_options(protocol: str, policy: RetryPolicy) -> dict[str, Any]:
    """Per-request timeouts, and client-side retries off: RetryPolicy is the one place that retries."""
    if protocol in ("http", "https"):
        import aiohttp

        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=policy.timeout_s)}}
    if protocol in ("s3", "s3a"):
        # botocore's "max_attempts" counts retries; "total_max_attempts" counts the first try too.
        return {"config_kwargs": {"connect_timeout": policy.timeout_s, "read_timeout": policy.timeout_s,
                                  "retries": {"total_max_attempts": 1, "mode": "standard"}}}
    return {}


def _merge(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in given.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _http_size(url: str, timeout_s: float, headers: dict[str, str]) -> int:
    """Content-Length from a HEAD request; 404/410 -> FileNotFoundError, other failures keep their status."""
    request = urllib.request.Request(url, method="HEAD", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length")
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            raise FileNotFoundError(url) from exc
        raise
    if length is None:
        raise ValueError(f"{url}: the server gives no Content-Length; ranged reads need it")
    return int(length)


class ByteCounter:
    """Bytes and requests fetched from remote storage by this process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.requests = 0

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.requests += 1


class _ProcessState:
    """What a Storage holds per process."""

    def __init__(self, block_budget: int) -> None:
        self.fs: fsspec.AbstractFileSystem | None = None
        self.blocks = BlockCache(block_budget)
        self.counter = ByteCounter()


class Storage:
    """A dataset root on some filesystem; every path handed to it is relative and checked for safety."""

    def __init__(self, root: str | Path, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None, cache: DiskCache | None = None,
                 block_budget: int = DEFAULT_BLOCK_BUDGET) -> None:
        """cache: keep whole remote files on local disk (remote roots only); without it only ranges are read.
        block_budget: bytes of fetched blocks kept in memory per process, prefetched ones included."""
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self.block_budget = block_budget
        # Blocks small enough that the budget holds several (decoders of every camera plus prefetch share it).
        self.block_size = min(BLOCK_SIZE, max(MIN_BLOCK_SIZE, block_budget // 64))
        root = str(root)
        protocol = root.split("://", 1)[0] if "://" in root else "file"
        self.protocol = protocol
        self.is_local = protocol in ("file", "local")
        self._headers = dict((storage_options or {}).get("headers") or {})
        self.url = root
        self._options = {} if self.is_local else _merge(_default_options(protocol, self.retry),
                                                         dict(storage_options or {}))
        # Filesystem, block cache and counters belong to one process: fsspec's async filesystems (HTTP, S3) are
        # not fork-safe and locks copied by a fork may be held by a thread that does not exist in the child.
        self._process = ProcessLocal(partial(_ProcessState, block_budget))
        if self.is_local:
            # Absolute and in the filesystem's own spelling, so listed paths can be made relative again.
            self.root = self.fs._strip_protocol(os.path.abspath(Path(root.removeprefix("file://")).expanduser()))
        else:
            self.root = fsspec.core.url_to_fs(root, **self._options)[1].rstrip("/")

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        state = self._process.get()
        if state.fs is None:
            if self.is_local:
                state.fs = fsspec.filesystem("file")
            else:
                state.fs = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **self._options)[0]
                if hasattr(state.fs, "retries"):  # s3fs retries on its own too (5 by default)
                    state.fs.retries = 1
        return state.fs

    @property
    def blocks(self) -> BlockCache:
        return self._process.get().blocks

    @property
    def counter(self) -> ByteCounter:
        return self._process.get().counter

    def describe(self, relative: str) -> str:
        """The full location of a file, for messages."""
        return posixpath.join(self.url.rstrip("/"), relative) if not self.is_local else str(Path(self.root) / relative)

    def _path(self, relative: str, what: str) -> str:
        check_relative(relative, what=what)
        if self.is_local:
            return str(local_path(self.root, relative, what=what))
        return f"{self.root}/{relative}"

    def local_path(self, relative: str, what: str) -> Path:
        """The local file of `relative` (local roots only)."""
        if not self.is_local:
            raise ValueError(f"{self.describe(relative)}: not a local file")
        return Path(self._path(relative, what))

    def exists(self, relative: str, what: str = "file") -> bool:
        try:
            self.size(relative, what)
        except FileNotFoundError:
            return False
        return True

    def size(self, relative: str, what: str = "file") -> int:
        """Size in bytes; FileNotFoundError when the file is missing."""
        path = self._path(relative, what)
        if self.is_local:
            return os.path.getsize(path)
        # fsspec's HTTP filesystem reports any failed HEAD (a 503 too) as "not found": ask the server ourselves.
        read = (lambda: _http_size(path, self.retry.timeout_s, self._headers)) if self.protocol in ("http", "https") \
            else (lambda: self.fs.size(path))
        return int(call_with_retries(read, f"{self.describe(relative)} (size)", self.retry))

    def identity(self, relative: str, what: str = "file") -> str:
        """What names this version of a file: its location, size and (local files) modification time. A remote
        root pinned to a revision (hf://...@sha) or holding immutable objects keeps identities stable."""
        path = self._path(relative, what)
        if self.is_local:
            try:
                stat = os.stat(path)
            except FileNotFoundError as exc:
                raise MissingFileError(f"{path}: {what} not found") from exc
            return f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
        try:
            return f"{self.describe(relative)}|{self.size(relative, what)}"
        except FileNotFoundError as exc:
            raise MissingFileError(f"{self.describe(relative)}: {what} not found") from exc

    def read_bytes(self, relative: str, what: str = "file") -> bytes:
        """A whole (small) file."""
        path = self._path(relative, what)
        data = call_with_retries(lambda: self.fs.cat_file(path), self.describe(relative), self.retry)
        if not self.is_local:
            self.counter.add(len(data))
        return data

    def glob(self, pattern: str) -> list[str]:
        """Relative paths matching a glob under the root (filesystems that can list)."""
        base = self.root.rstrip("/") + "/"
        found = call_with_retries(lambda: self.fs.glob(base + pattern), f"{self.describe(pattern)} (listing)",
                                  self.retry)
        return sorted(str(p)[len(base):] if str(p).startswith(base) else str(p) for p in found)

    def can_list(self) -> bool:
        return self.protocol not in ("http", "https")

    def open(self, relative: str, what: str = "file") -> io.RawIOBase | str:
        """A path string for local files, else a RangedReader fetching byte ranges on demand."""
        path = self._path(relative, what)
        if self.is_local:
            if not Path(path).is_file():
                raise MissingFileError(f"{path}: {what} not found")
            return path
        try:
            size = self.size(relative, what)
        except FileNotFoundError as exc:
            raise MissingFileError(f"{self.describe(relative)}: {what} not found") from exc
        reader = RangedReader(self, path, self.describe(relative), size, self.block_size)
        if self.cache is None:
            return reader
        return self.cache.fetch(self.describe(relative), size, reader.download)


class RangedReader(io.RawIOBase):
    """A read-only, seekable view of a remote file that fetches aligned blocks on demand, through the storage's
    shared BlockCache (so prefetched blocks serve the decoders)."""

    def __init__(self, storage: Storage, path: str, name: str, size: int, block_size: int = BLOCK_SIZE) -> None:
        super().__init__()
        self._storage, self._path, self.name, self._size = storage, path, name, size
        self._block_size = block_size
        self._pos = 0
        self.prefetching = False  # reads by the prefetcher do not count as waiting

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def _block(self, index: int) -> bytes:
        start = index * self._block_size
        end = min(self._size, start + self._block_size)

        def fetch() -> bytes:
            def once() -> bytes:
                data = self._storage.fs.cat_file(self._path, start=start, end=end)
                if len(data) > end - start:  # fsspec does not check for 206: a server ignoring Range sends all
                    raise ValueError(f"the server ignored the byte range and sent {len(data)} bytes; ranged reads "
                                     "need a server that supports HTTP Range requests")
                if len(data) < end - start:  # a short body must never pass as the file's content
                    raise ConnectionError(f"short read: {len(data)} of {end - start} bytes")
                return data

            data = call_with_retries(once, f"{self.name} bytes {start}-{end - 1}", self._storage.retry)
            self._storage.counter.add(len(data))
            return data

        return self._storage.blocks.get((self._path, index), fetch, reader=not self.prefetching)

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        parts = []
        while self._pos < end:
            index, offset = divmod(self._pos, self._block_size)
            block = self._block(index)
            chunk = block[offset: offset + (end - self._pos)]
            parts.append(chunk)
            self._pos += len(chunk)
        return b"".join(parts)

    def download(self, target: Path) -> None:
        """Copy the whole file to `target`, block by block (each block retried)."""
        with open(target, "wb") as out:
            for index in range(-(-self._size // self._block_size)):
                out.write(self._block(index))

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
