"""Where a dataset's bytes come from: a local folder or an fsspec URL (hf://, s3://, http(s)://, file://).

`Storage` reads small files whole and hands out `RangedReader`s, seekable file objects that fetch only the byte
ranges a reader asks for (parquet footers and row groups, mp4 index and frame spans), in blocks, with retries,
and count the bytes they fetch. Local roots keep the plain-path fast path.

Integrity (see `storage/integrity.py`): a reader reads the version of its file that opening it saw; S3 and HTTP
range requests say so (If-Match) and every answer's size and ETag are checked, so a file replaced on the server
mid-epoch is an error, never a mix of two versions. Hub roots are pinned to the commit their revision resolves to
when the Storage is made. With validate="full", whole files entering the disk cache are hashed against the hash
the host publishes.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import os
import posixpath
import re
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import fsspec
import fsspec.asyn

from robostream.errors import ChecksumMismatchError, FileChangedError, MissingFileError, RobostreamError, TooLargeError
from robostream.process_local import ProcessLocal
from robostream.storage.blocks import BlockCache
from robostream.storage.cache import CachedPath, Writable
from robostream.storage.exact_ranges import ExactRanges
from robostream.storage.http import (
    Answer,
    BodyLimit,
    Home,
    http_get,
    http_head,
    http_opening,
    http_range,
    http_stat,
    http_whole,
)
from robostream.storage.hub_ranges import HubRanges
from robostream.storage.integrity import (
    FileVersion,
    changed_error,
    check_range_answer,
    digest_from_info,
    mismatch_error,
    opening_span,
    strong_etag,
)
from robostream.storage.object_ranges import ObjectRanges, object_ranges_allowed, usable_here
from robostream.storage.options import ReadOptions
from robostream.storage.paths import check_relative, local_path
from robostream.storage.read_ahead import Need, ReadAhead
from robostream.storage.redact import redact_url
from robostream.storage.retry import (
    RemoteReadError,
    RetryPolicy,
    call_with_retries,
    call_with_retries_async,
    http_status,
    is_throttle,
)

# The unit of the block cache. Range requests fetch runs of blocks (storage/read_ahead.py merges them up to 2 MiB),
# so the block is not the request size: it is the granularity of what is kept and of what a random read costs.
# Random reads (a map-style sample: a keyframe run of a few KiB plus FFmpeg's 64 KiB read-ahead) waste up to a
# block on each side, so blocks stay small.
BLOCK_SIZE = 64 << 10
MIN_BLOCK_SIZE = 16 << 10
# The most a file read whole (Storage.read_bytes: metadata files) may hold. Real datasets' are far smaller: info.json
# kilobytes, tasks.parquet and stats.json at most a few MB, an episodes parquet tens of MB; a server announcing or
# sending more is refused before it fills the memory.
WHOLE_FILE_LIMIT = 256 << 20


def _default_options(protocol: str, policy: RetryPolicy, max_in_flight: int) -> dict[str, Any]:
    """Per-request timeouts, and client-side retries off: RetryPolicy is the one place that retries."""
    if protocol in ("http", "https"):
        import aiohttp

        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=policy.timeout_s)}}
    if protocol in ("s3", "s3a"):
        # botocore's "max_attempts" counts retries; "total_max_attempts" counts the first try too.
        # botocore's pool (10 connections by default) would cap the read-ahead's requests in flight.
        return {
            "config_kwargs": {
                "connect_timeout": policy.timeout_s,
                "read_timeout": policy.timeout_s,
                "retries": {"total_max_attempts": 1, "mode": "standard"},
                "max_pool_connections": max_in_flight + 8,
            }
        }  # + the readers' own
    return {}


def _require_s3fs(root: str) -> None:
    try:
        importlib.import_module("s3fs")
    except ImportError as exc:
        raise RobostreamError(
            f"{redact_url(root)}: reading s3:// needs s3fs, an optional dependency: pip install 'robostream[s3]'"
        ) from exc


# aiohttp sends a session's own headers, cookies and auth with every request, to any host a redirect names.
SESSION_CREDENTIALS = ("headers", "auth", "cookies")


def _refuse_session_credentials(root: str, options: dict[str, Any]) -> None:
    """Over HTTP, credentials go in storage_options["headers"] (or the URL), which reach the root's origin only."""
    found = sorted(set(SESSION_CREDENTIALS) & set(options.get("client_kwargs") or {}))
    if found:
        raise ValueError(
            f"{redact_url(root)}: storage_options['client_kwargs'] {found} would be sent to every host "
            "a redirect names (aiohttp's session sends its own with every request); put credentials in "
            "storage_options['headers'] or in the URL (http://user:password@host/...), which go to the "
            "root's origin only"
        )


def _merge(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in given.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _info_version(protocol: str, info: dict[str, Any]) -> FileVersion:
    """A file's version from an fsspec `info()` entry (S3: its ETag; the Hub: its published hash)."""
    etag = info.get("ETag") if protocol in ("s3", "s3a") else None
    return FileVersion(int(info["size"]), etag or None, digest_from_info(protocol, info))


_COMMIT = re.compile(r"[0-9a-f]{40}")


def pin_hub_root(root: str, options: dict[str, Any], policy: RetryPolicy) -> str:
    """An hf:// repo root with its revision (a branch, tag or none: main) replaced by the commit it names now, so
    every file of this Storage, in every process, comes from one commit. Bucket roots (no revisions) and roots at
    a commit sha are returned as they are."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import parse_hf_uri

    parsed = parse_hf_uri(root)
    if parsed.type == "bucket" or _COMMIT.fullmatch(parsed.revision or ""):
        return root
    api = HfApi(endpoint=options.get("endpoint"), token=options.get("token"))
    try:
        sha = call_with_retries(
            lambda: api.repo_info(parsed.id, repo_type=parsed.type, revision=parsed.revision).sha,
            f"{root} (resolving revision {parsed.revision or 'main'!r} to a commit)",
            policy,
        )
    except RemoteReadError as exc:
        cause = exc.__cause__
        if isinstance(cause, (RepositoryNotFoundError, RevisionNotFoundError)):
            reason = str(cause).strip().splitlines()[0]
            raise MissingFileError(
                f"{root}: {type(cause).__name__}: {reason}; check the repository id and the "
                "revision (a private or gated repository needs a token)"
            ) from cause
        raise
    path = f"/{parsed.path_in_repo}" if parsed.path_in_repo else ""
    return f"hf://{constants.REPO_TYPES_URL_PREFIXES.get(parsed.type, '')}{parsed.id}@{sha}{path}"


def _read_at_most(path: str, size: int) -> bytes:
    """The first `size` bytes of a local file (all of it if smaller)."""
    with open(path, "rb") as handle:
        return handle.read(size)


def _local_version(stat: os.stat_result) -> FileVersion:
    """A local file's version: its size, and modification time, inode and change time as the token (a file
    replaced by one of the same size and modification time still has another inode or change time)."""
    return FileVersion(stat.st_size, f"{stat.st_mtime_ns}:{stat.st_ino}:{stat.st_ctime_ns}")


def _local_versions(path: str, relative: str) -> dict[str, FileVersion]:
    """Every file under a local folder (followed links included, as a walk sees them) with its version, by its
    path relative to the root (`relative`: the folder's)."""
    found: dict[str, FileVersion] = {}
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        name = f"{relative}/{entry.name}" if relative else entry.name
        if entry.is_dir(follow_symlinks=False):
            found |= _local_versions(entry.path, name)
        elif entry.is_file():
            found[name] = _local_version(entry.stat())
    return found


class ByteCounter:
    """Bytes, requests and the requests' time fetched from remote storage by this process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.requests = 0
        self.requests_s = 0.0
        self.retries = 0
        self.throttled = 0

    def add(self, nbytes: int, seconds: float) -> None:
        """A request answered `nbytes` after `seconds` (retries included)."""
        with self._lock:
            self.bytes += nbytes
            self.requests += 1
            self.requests_s += seconds

    def retried(self, *, throttled: bool) -> None:
        """A request failed in a way worth retrying (`throttled`: the store asked for fewer requests)."""
        with self._lock:
            self.retries += 1
            self.throttled += throttled


@dataclass(frozen=True)
class StorageStats:
    """What one process read from a storage so far (readers outside storage/ see only this)."""

    bytes_read: int  # bytes fetched from remote storage
    requests: int  # range requests made
    requests_s: float  # their time summed (several run at once: may exceed the wall time)
    wait_s: float  # time readers (not the read-ahead) waited for blocks
    block_bytes_peak: int  # most bytes of fetched blocks held at once
    in_flight_peak: int = 0  # most read-ahead requests under way at once
    max_in_flight: int = 0  # read-ahead requests allowed under way at once (its threads)
    evicted_unread: int = 0  # blocks fetched ahead but evicted before a reader took them
    read_ahead_failures: int = 0  # read-ahead requests that failed (the readers then fetched for themselves)
    reader_fetches: int = 0  # blocks readers fetched themselves, a round trip each (nobody asked for them ahead)
    retries: int = 0  # requests retried (transient failures, throttles included)
    throttled: int = 0  # of those, the store's asks for fewer requests (429, 503 SlowDown)
    allowed_in_flight_low: int = 0  # the fewest read-ahead requests allowed at once after a throttle (0: none)


class _ProcessState:
    """What a Storage holds per process, its own: counters and the versions of the files it opened."""

    def __init__(self) -> None:
        self.counter = ByteCounter()
        self.versions: dict[str, FileVersion] = {}  # remote files opened, as first seen (see Storage.open)


class _Reading:
    """A process's filesystem client, fetched blocks and read-ahead: one Storage's, or shared (SharedReading)."""

    def __init__(self, block_budget: int, max_in_flight: int) -> None:
        self.lock = threading.Lock()  # sources open in threads: one client made, not one per thread
        self.fs: fsspec.AbstractFileSystem | None = None
        self.blocks = BlockCache(block_budget)
        self.read_ahead = ReadAhead(self.blocks, max_in_flight=max_in_flight)
        self.exact_ranges = ExactRanges(budget_bytes=block_budget // 4, threads=max_in_flight)
        self.hub_ranges: HubRanges | None = None
        self.object_ranges: ObjectRanges | None = None


class SharedReading:
    """Filesystem clients, fetched blocks and read-ahead that the storages of many datasets (the sources of a
    mixture) share in each process, one set per protocol and options: connections, threads and fetched bytes then
    grow with what is being read, not with the sources seen, and the read buffer bounds them all together. Blocks
    are keyed by the file's full location and version, so sources never see each other's bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, ProcessLocal] = {}

    def group(self, key: str, factory: Any) -> ProcessLocal:
        with self._lock:
            return self._groups.setdefault(key, ProcessLocal(factory))

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker builds its own groups
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._groups = {}


class Probed(NamedTuple):
    """What `Storage.probe` found, by relative path: the files read whole, the versions asked, and the files not
    found (each with its error, which names the file)."""

    whole: dict[str, bytes]
    versions: dict[str, FileVersion]
    missing: dict[str, FileNotFoundError]


class Storage:
    """A dataset root on some filesystem; every path handed to it is relative and checked for safety."""

    def __init__(
        self,
        root: str | Path,
        read_options: ReadOptions | None = None,
        *,
        shared: SharedReading | None = None,
        cache_files: bool = True,
    ) -> None:
        """
        Args:
            root: a local folder or an fsspec URL.
            read_options: how the bytes are read (storage_options, retry, disk cache, read buffer, max_in_flight,
                validate); default ReadOptions(). Its data_files_root is the caller's (format/metadata.py).
            shared: read through the filesystem client, blocks and read-ahead this shares with other storages of
                the same protocol and options (default: this storage's own).
            cache_files: keep whole remote files in the options' disk cache (remote roots only); False: ranges
                only (the metadata's storage: the node's metadata snapshot keeps its tables).
        """
        options = read_options or ReadOptions()
        self.read_options = options
        self.retry = options.retry_policy
        self.cache = options.disk_cache() if cache_files else None
        self.block_budget = options.read_buffer_bytes
        block_budget, max_in_flight = self.block_budget, options.max_in_flight
        storage_options = dict(options.storage_options or {})
        # Blocks small enough that the budget holds several (decoders of every camera plus prefetch share it).
        self.block_size = min(BLOCK_SIZE, max(MIN_BLOCK_SIZE, block_budget // 64))
        root = str(root)
        protocol = root.split("://", 1)[0] if "://" in root else "file"
        self.protocol = protocol
        self.is_local = protocol in ("file", "local")
        if protocol in ("s3", "s3a"):
            _require_s3fs(root)
        if protocol in ("http", "https"):
            _refuse_session_credentials(root, storage_options)
        if protocol == "hf":  # one commit for every file and process (fetched once, here, before any fork)
            root = pin_hub_root(root, storage_options, self.retry)
        self.hub_repository = protocol == "hf" and not root.startswith("hf://buckets/")
        self.url = root
        self._options = (
            {} if self.is_local else _merge(_default_options(protocol, self.retry, max_in_flight), storage_options)
        )
        self.home = Home.of(self.url, self._options)  # what HTTP requests send to the root's origin only
        # Ranged GETs through obstore where every credential stays with its origin (storage/object_ranges.py)
        self._objects = object_ranges_allowed(protocol=protocol, url=root, options=self._options, home=self.home)
        # Filesystem, block cache and counters belong to one process: fsspec's async filesystems (HTTP, S3) are
        # not fork-safe and locks copied by a fork may be held by a thread that does not exist in the child.
        self._process = ProcessLocal(_ProcessState)
        reading = partial(_Reading, block_budget, max_in_flight)
        self._reading = (
            ProcessLocal(reading)
            if shared is None or self.is_local
            else shared.group(
                f"{protocol}|{json.dumps(self._options, sort_keys=True, default=repr)}|{block_budget}|{max_in_flight}"
                f"|{options.read_buffer_grows}",
                reading,
            )
        )
        if self.is_local:
            # Absolute and in the filesystem's own spelling, so listed paths can be made relative again.
            self.root = self.fs._strip_protocol(os.path.abspath(Path(root.removeprefix("file://")).expanduser()))
        else:
            self.root = fsspec.core.url_to_fs(root, **self._options)[1].rstrip("/")

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        state = self._reading.get()
        if state.fs is None:
            with state.lock:
                if state.fs is None and self.is_local:
                    state.fs = fsspec.filesystem("file")
                elif state.fs is None:
                    fs = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **self._options)[0]
                    if hasattr(fs, "retries"):  # s3fs retries on its own too (5 by default)
                        fs.retries = 1
                    state.fs = fs
        return state.fs

    @property
    def hub_ranges(self) -> HubRanges:
        """This process's direct ranged reads of Hub repository files (hf:// roots)."""
        state, fs = self._reading.get(), self.fs
        with state.lock:
            if state.hub_ranges is None:
                state.hub_ranges = HubRanges(fs, _default_options("http", self.retry, self.read_options.max_in_flight))
        return state.hub_ranges

    @property
    def object_ranges(self) -> ObjectRanges | None:
        """This process's obstore clients for ranged reads (None: this root's or this process's ranges go through
        fsspec; see storage/object_ranges.py)."""
        if not self._objects or not usable_here():
            return None
        state = self._reading.get()
        if state.object_ranges is None:  # asked per request: the lock only while there is none yet
            with state.lock:
                if state.object_ranges is None:
                    state.object_ranges = ObjectRanges(protocol=self.protocol, options=self._options, policy=self.retry)
        return state.object_ranges

    @property
    def blocks(self) -> BlockCache:
        return self._reading.get().blocks

    @property
    def exact_ranges(self) -> ExactRanges:
        """This process's exact byte ranges fetched ahead (storage/exact_ranges.py), shared as the blocks are."""
        return self._reading.get().exact_ranges

    @property
    def counter(self) -> ByteCounter:
        return self._process.get().counter

    def retried(self, exc: BaseException) -> None:
        """A request of this storage failed and is retried: counted, and a throttle (429, 503 SlowDown) halves the
        read-ahead's requests in flight (storage/read_ahead.py)."""
        throttled = is_throttle(exc)
        self.counter.retried(throttled=throttled)
        if throttled:
            self.read_ahead.throttled()

    def stats(self) -> StorageStats:
        """This process's reads of this storage so far (bytes and requests its own; the rest, of the blocks and
        read-ahead, shared with the storages it shares them with)."""
        counter, reading = self._process.get().counter, self._reading.get()
        return StorageStats(
            counter.bytes,
            counter.requests,
            counter.requests_s,
            reading.blocks.wait_s,
            reading.blocks.peak_bytes,
            reading.read_ahead.in_flight_peak,
            reading.read_ahead.max_in_flight,
            reading.blocks.evicted_unread,
            reading.read_ahead.failures,
            reading.blocks.reader_fetches,
            counter.retries,
            counter.throttled,
            reading.read_ahead.allowed_low,
        )

    @property
    def read_ahead(self) -> ReadAhead:
        """This process's fetches ahead of the readers (remote roots)."""
        return self._reading.get().read_ahead

    def forget_version(self, path: str) -> None:
        """The file at `path` changed on the server: the next reader opened asks for its version again."""
        self._process.get().versions.pop(path, None)

    def describe(self, relative: str) -> str:
        """The full location of a file, for messages and cache identities (a user and password in the URL
        redacted: they never reach a message or a file)."""
        if self.is_local:
            return str(Path(self.root) / relative)
        return redact_url(posixpath.join(self.url.rstrip("/"), relative))

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
        return self.stat(relative, what).size

    def stat(self, relative: str, what: str = "file") -> FileVersion:
        """Size and version (ETag, published hash, Last-Modified; local files: modification time, inode and change
        time) of a file as the server describes it now; FileNotFoundError when missing."""
        path = self._path(relative, what)
        if self.is_local:
            return _local_version(os.stat(path))
        # fsspec's HTTP filesystem reports any failed HEAD (a 503 too) as "not found": ask the server ourselves.
        read = (
            (lambda: http_stat(self.fs, path, home=self.home))
            if self.protocol in ("http", "https")
            else (lambda: _info_version(self.protocol, self.fs.info(path)))
        )
        version = call_with_retries(read, f"{self.describe(relative)} (size)", self.retry, on_retry=self.retried)
        # The version a reader of this file opens (see open): a probe followed by an open asks the server once.
        self._process.get().versions.setdefault(path, version)
        return version

    def identity(self, relative: str, what: str = "file") -> str | None:
        """What names this version of a file's content: its location, size and version token (local files:
        modification time, inode and change time; remote: published hash, else ETag, else Last-Modified). None
        when nothing but the size names it (an HTTP server sending neither ETag nor Last-Modified): nothing
        derived from such a file may be kept across processes, a same-size replacement would go unseen."""
        try:
            version = self.stat(relative, what)
        except FileNotFoundError as exc:
            raise MissingFileError(f"{self.describe(relative)}: {what} not found") from exc
        return f"{self.describe(relative)}|{version.size}|{version.token}" if version.token else None

    def read_bytes(self, relative: str, what: str = "file", *, limit: int = WHOLE_FILE_LIMIT) -> bytes:
        """A whole (small) file: at most `limit` bytes, and exactly the size first seen in this process where a
        HEAD or a listing saw one. A larger file, or a server announcing or sending more, is a TooLargeError naming
        the file, the size and the bound, after at most the bound (and a chunk) was read; another size than the
        one first seen is a FileChangedError. (S3 and Hub buckets: their clients read the body whole, so the bound
        holds before the read only where a listing gave the size.)"""
        path, name = self._path(relative, what), self.describe(relative)
        bound, seen = self._whole_bound(path, name, limit)
        if self.is_local:
            read = partial(_read_at_most, path, bound.size + 1)
        elif self.protocol in ("http", "https"):
            read = partial(http_get, self.fs, path, bound, home=self.home)
        elif self.hub_repository:
            read = partial(self.hub_ranges.whole, path, bound)
        else:
            read = partial(self.fs.cat_file, path)
        started = time.perf_counter()
        data = call_with_retries(read, name, self.retry, on_retry=self.retried)
        return self._whole_checked(name, data, bound, seen, started)

    def _whole_bound(self, path: str, name: str, limit: int) -> tuple[BodyLimit, FileVersion | None]:
        """How much a whole read of `path` may hold, and the version first seen in this process (None: none)."""
        bound = BodyLimit(
            limit,
            f"the {limit} bytes a file read whole may hold (real datasets' metadata files are "
            "far smaller: check the URL and the server)",
        )
        seen = None if self.is_local else self._process.get().versions.get(path)
        if seen is not None:
            if seen.size > limit:
                raise TooLargeError(f"{name}: {seen.size} bytes, more than {bound.why}; nothing was read")
            bound = BodyLimit(
                seen.size, f"the {seen.size} bytes first seen (the file changed since, or the server misbehaves)"
            )
        return bound, seen

    def _whole_checked(
        self, name: str, data: bytes, bound: BodyLimit, seen: FileVersion | None, started: float
    ) -> bytes:
        """A whole read's bytes counted and checked against its bound and the size first seen."""
        if not self.is_local:
            self.counter.add(len(data), time.perf_counter() - started)
        if len(data) > bound.size:
            raise TooLargeError(f"{name}: {len(data)} bytes or more, more than {bound.why}")
        if seen is not None and len(data) != seen.size:
            raise changed_error(name, seen, f"size {len(data)}")
        return data

    def probe(self, *, whole: Sequence[str], heads: Sequence[str], what: str = "file") -> Probed:
        """HTTP(S) roots, which cannot list: files read whole (as `read_bytes` reads them) and versions asked by
        HEAD (as `stat` asks them), all at once in one call to the event loop, so they cost one round trip where
        one after another costs one each (a mixture's sources prove their metadata current this way:
        format/metadata.py probe_meta). Each request retries on its own (the storage's RetryPolicy). A file not
        found is in the answer's `missing`; any other failure is raised once every request has ended (the first in
        the order asked: `whole`, then `heads`).

        Args:
            whole: relative paths of files to read whole (at most WHOLE_FILE_LIMIT bytes each).
            heads: relative paths of files whose size and version to ask for.
            what: what the files are, for errors.
        """
        if self.protocol not in ("http", "https"):
            raise ValueError(f"{redact_url(self.url)}: Storage.probe is for http(s) roots; use read_bytes and stat")
        fs = self.fs
        paths = [self._path(relative, what) for relative in (*whole, *heads)]

        async def whole_file(relative: str, path: str) -> bytes:
            name = self.describe(relative)
            bound, seen = self._whole_bound(path, name, WHOLE_FILE_LIMIT)
            started = time.perf_counter()
            data = await call_with_retries_async(
                partial(http_whole, fs, path, bound, home=self.home), name, self.retry, on_retry=self.retried
            )
            return self._whole_checked(name, data, bound, seen, started)

        async def head(relative: str, path: str) -> FileVersion:
            version = await call_with_retries_async(
                partial(http_head, fs, path, home=self.home),
                f"{self.describe(relative)} (size)",
                self.retry,
                on_retry=self.retried,
            )
            self._process.get().versions.setdefault(path, version)  # as `stat` keeps it
            return version

        async def every() -> list[Any]:
            files = [whole_file(r, p) for r, p in zip(whole, paths)]
            versions = [head(r, p) for r, p in zip(heads, paths[len(whole) :])]
            return await asyncio.gather(*files, *versions, return_exceptions=True)

        answers = fsspec.asyn.sync(fs.loop, every)
        probed = Probed({}, {}, {})
        for index, (relative, answer) in enumerate(zip((*whole, *heads), answers)):
            if isinstance(answer, FileNotFoundError):
                probed.missing[relative] = answer
            elif isinstance(answer, BaseException):
                raise answer
            elif index < len(whole):
                probed.whole[relative] = answer
            else:
                probed.versions[relative] = answer
        return probed

    def glob(self, pattern: str) -> list[str]:
        """Relative paths matching a glob under the root (filesystems that can list)."""
        base = self.root.rstrip("/") + "/"
        found = call_with_retries(
            lambda: self.fs.glob(base + pattern),
            f"{self.describe(pattern)} (listing)",
            self.retry,
            on_retry=self.retried,
        )
        return sorted(str(p)[len(base) :] if str(p).startswith(base) else str(p) for p in found)

    def can_list(self) -> bool:
        return self.protocol not in ("http", "https")

    @property
    def immutable(self) -> bool:
        """Whether no file under the root can change: a Hub repository root pinned to a commit."""
        if not self.hub_repository:
            return False
        from huggingface_hub.utils import parse_hf_uri

        return bool(_COMMIT.fullmatch(parse_hf_uri(self.url).revision or ""))

    def list_versions(self, folder: str) -> dict[str, FileVersion]:
        """Every file under `folder` (relative) with its version: size and ETag (S3), published hash (Hub) or, for
        local files, modification time, inode and change time as the token. One listing request on a remote store
        that lists (a local walk costs none); the versions are remembered, so opening these files asks the server
        nothing more in this process."""
        if not self.can_list():
            raise ValueError(f"{redact_url(self.url)}: {self.protocol} cannot list folders")
        base = self._path(folder, "folder").rstrip("/")
        if self.is_local:
            return _local_versions(base, folder.rstrip("/"))
        try:
            listing = call_with_retries(
                lambda: self.fs.find(base, detail=True),
                f"{self.describe(folder)} (listing)",
                self.retry,
                on_retry=self.retried,
            )
        except FileNotFoundError:
            return {}
        prefix = self.root.rstrip("/") + "/"
        found = {
            str(path)[len(prefix) :]: _info_version(self.protocol, info)
            for path, info in listing.items()
            if info.get("type", "file") == "file" and str(path).startswith(prefix)
        }
        versions = self._process.get().versions
        for relative, version in found.items():
            versions.setdefault(f"{self.root}/{relative}", version)
        return found

    def open(
        self, relative: str, what: str = "file", *, first_bytes: int = 0, last_bytes: int = 0
    ) -> io.RawIOBase | str:
        """A path string for local files, else a RangedReader fetching byte ranges on demand.

        Args:
            relative: the file's path under the root.
            what: what the file is, for errors.
            first_bytes, last_bytes: a remote file's first or last bytes wanted at once (a video's moov, a parquet
                footer; at most one of them): asked for now. Where this process has not asked for the file's
                version yet (HTTP(S), S3), the request for them tells it, as a HEAD would: one round trip where a
                HEAD and a GET took two.
        """
        path = self._path(relative, what)
        if self.is_local:
            if not Path(path).is_file():
                raise MissingFileError(f"{path}: {what} not found")
            return path
        # A file's version is asked for once per process: every later reader of it reads that version (If-Match),
        # so a file replaced since is still an error at its next read, and a decoder opened again costs no HEAD.
        versions = self._process.get().versions
        version = versions.get(path)
        opening = None
        try:
            if version is None and (first_bytes or last_bytes) and self.protocol in ("http", "https", "s3", "s3a"):
                opening = self._opening_read(relative, path, first_bytes=first_bytes, last_bytes=last_bytes)
            if opening is not None:
                version = versions.setdefault(path, opening[0])  # another thread's first look-up wins
            elif version is None:
                version = versions[path] = self.stat(relative, what)
        except FileNotFoundError as exc:
            raise MissingFileError(f"{self.describe(relative)}: {what} not found") from exc
        reader = RangedReader(self, path, self.describe(relative), version, self.block_size)
        if opening is not None and opening[0] == version:
            reader.keep(opening[1], opening[2])
        elif first_bytes:
            reader.fetch_ahead(0, first_bytes, need="now")
        elif last_bytes:
            reader.fetch_ahead(max(0, version.size - last_bytes), version.size, need="now")
        if self.cache is None or not version.token:
            return reader  # a copy of a file nothing but its size names would be served after a same-size change
        return self._cached(reader, version)

    def _opening_read(
        self, relative: str, path: str, *, first_bytes: int, last_bytes: int
    ) -> tuple[FileVersion, int, bytes] | None:
        """A file's version, and the first byte and bytes of its first `first_bytes` or last `last_bytes`, from one
        GET (None: the server had no byte to send, an empty file: ask its size). The version is what the answer's
        Content-Range (its size), ETag and Last-Modified say, as a HEAD's would."""
        name = self.describe(relative)
        nbytes = first_bytes or last_bytes
        byte_range = f"bytes=0-{first_bytes - 1}" if first_bytes else f"bytes=-{last_bytes}"
        fs = self.fs
        if self.protocol in ("http", "https"):
            ask = partial(fsspec.asyn.sync, fs.loop, http_opening, fs, path, byte_range, nbytes, home=self.home)
        else:
            ask = partial(fsspec.asyn.sync, fs.loop, _s3_range, fs, path, byte_range, None)
        started = time.perf_counter()

        def once() -> tuple[FileVersion, int, bytes] | None:
            answer = ask()
            span = opening_span(
                name,
                first_bytes=first_bytes,
                last_bytes=last_bytes,
                status=answer.status,
                content_range=answer.content_range,
                nbytes=len(answer.body),
            )
            if span is None:
                return None
            size, start, stop = span
            if self.protocol in ("http", "https"):
                version = FileVersion(size, answer.etag, last_modified=answer.last_modified)
            else:
                version = _info_version(self.protocol, {"size": size, "ETag": answer.etag})
            # the body against the span its Content-Range names: a short one is a transfer to retry
            check_range_answer(
                name,
                version,
                start,
                stop,
                answer.status,
                answer.content_range,
                answer.etag,
                len(answer.body),
            )
            return version, start, answer.body

        opened = call_with_retries(once, f"{name} (first bytes)", self.retry, on_retry=self.retried)
        if opened is not None:
            self.counter.add(len(opened[2]), time.perf_counter() - started)
        return opened

    def _cached(self, reader: RangedReader, version: FileVersion) -> CachedPath:
        """The disk cache's copy of a file; with validate="full" one whose hash mismatched is fetched once more."""
        assert self.cache is not None
        expected = version.digest if self.read_options.validate == "full" else None
        fetch = partial(
            self.cache.fetch, reader.name, version.size, reader.download, version=version.token, expected=expected
        )
        try:
            return fetch()
        except ChecksumMismatchError as exc:
            self.blocks.discard(reader.key)  # the bad bytes may be held in memory too
            warnings.warn(
                f"{reader.name}: downloaded bytes do not match the published hash (expected "
                f"{exc.expected}, got {exc.got}); fetching the file once more",
                RuntimeWarning,
                stacklevel=3,
            )
        try:
            return fetch()
        except ChecksumMismatchError as exc:
            self.blocks.discard(reader.key)
            assert expected is not None
            raise mismatch_error(reader.name, expected, exc.got, attempts=2) from exc


async def _s3_range(fs: Any, path: str, byte_range: str, if_match: str | None) -> Answer:
    """get_object for `byte_range` ("bytes=A-B", or "bytes=-N": the last N) with If-Match when known, keeping
    Content-Range and ETag (a 412 or 416 is answered, not raised, as storage/http.py does)."""
    bucket, key, version_id = fs.split_path(path)
    request = {"Bucket": bucket, "Key": key, "Range": byte_range}
    if version_id:
        request["VersionId"] = version_id
    if if_match:
        request["IfMatch"] = if_match
    try:
        response = await fs._call_s3("get_object", **request)
    except OSError as exc:
        for status in (412, 416):
            if any(e is not None and http_status(e) == status for e in (exc, exc.__cause__)):
                return Answer(status, None, None, b"")
        raise
    try:
        body = await response["Body"].read()
    finally:
        response["Body"].close()
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return Answer(status, response.get("ContentRange"), response.get("ETag"), body)


class RangedReader(io.RawIOBase):
    """A read-only, seekable view of one version of a remote file that fetches aligned blocks on demand, through
    the storage's shared BlockCache (so blocks fetched ahead serve the decoders)."""

    def __init__(
        self, storage: Storage, path: str, name: str, version: FileVersion, block_size: int = BLOCK_SIZE
    ) -> None:
        super().__init__()
        self._storage, self._path, self.name, self._version = storage, path, name, version
        self._size = version.size
        self._block_size = block_size
        self._pos = 0
        # Blocks are shared per file version: a reader of a newer version never gets an older one's bytes.
        self.key = f"{path}|{version.size}|{version.token}"

    @property
    def version(self) -> FileVersion:
        """The version of the file this reader reads (as its first look-up saw it)."""
        return self._version

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

    def _answer(self, start: int, end: int) -> Answer:
        objects = self._storage.object_ranges
        if objects is not None:
            answer = objects.range(path=self._path, start=start, end=end, if_match=strong_etag(self._version.etag))
            if answer is not None:
                return answer
        fs, protocol = self._storage.fs, self._storage.protocol
        if protocol in ("http", "https"):
            return fsspec.asyn.sync(
                fs.loop,
                http_range,
                fs,
                self._path,
                start,
                end,
                strong_etag(self._version.etag),
                home=self._storage.home,
            )
        if protocol in ("s3", "s3a"):
            return fsspec.asyn.sync(
                fs.loop, _s3_range, fs, self._path, f"bytes={start}-{end - 1}", strong_etag(self._version.etag)
            )
        if self._storage.hub_repository:  # straight from where the Hub serves the bytes (buckets: HfFileSystem)
            return self._storage.hub_ranges.range(self._path, start, end)
        # HfFileSystem reads through a read-ahead buffer by default: each block would fetch up to the end of the
        # file (or its 5 MB block size); "none" fetches exactly the bytes asked for.
        options = {"cache_type": "none"} if protocol == "hf" else {}
        return Answer(None, None, None, fs.cat_file(self._path, start=start, end=end, **options))

    @property
    def block_size(self) -> int:
        return self._block_size

    def fetch_range(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of this version of the file, checked (status, Content-Range, ETag, length),
        retried under the storage's policy, and counted."""

        def once() -> bytes:
            answer = self._answer(start, end)
            if answer.status == 412:
                raise changed_error(self.name, self._version, "412 Precondition Failed for If-Match")
            check_range_answer(
                self.name, self._version, start, end, answer.status, answer.content_range, answer.etag, len(answer.body)
            )
            return answer.body

        started = time.perf_counter()
        try:
            data = call_with_retries(
                once, f"{self.name} bytes {start}-{end - 1}", self._storage.retry, on_retry=self._storage.retried
            )
        except FileChangedError:
            self._storage.forget_version(self._path)  # a reader opened from now on reads the new version
            raise
        self._storage.counter.add(len(data), time.perf_counter() - started)
        return data

    def fetch_ahead(self, start: int, end: int, *, need: Need, request_bytes: int | None = None) -> None:
        """Fetch bytes [start, end) into the block cache in the background, in requests of at most
        `request_bytes` (see storage/read_ahead.py)."""
        self._storage.read_ahead.fetch(self, start, end, need=need, request_bytes=request_bytes)

    def fetch_exact(self, spans: Iterable[tuple[int, int]]) -> None:
        """Fetch these byte spans exactly (not in blocks), in the background (storage/exact_ranges.py)."""
        self._storage.exact_ranges.fetch(self, spans)

    def take_exact(self, start: int, end: int) -> bytes:
        """Bytes [start, end): from spans fetched with `fetch_exact`, else fetched now."""
        return self._storage.exact_ranges.take(self, start, end)

    def keep(self, start: int, data: bytes) -> None:
        """Bytes [start, start + len(data)) of this version, fetched already: the blocks they cover whole go to the
        block cache, as bytes fetched ahead (the last block of the file is whole where it ends)."""
        end = start + len(data)
        first = -(-start // self._block_size)
        stop = -(-end // self._block_size) if end == self._size else end // self._block_size
        blocks = self._storage.blocks
        view = memoryview(data)
        for key in blocks.claim((self.key, index) for index in range(first, stop)):
            at = key[1] * self._block_size
            blocks.fulfil(key, bytes(view[at - start : min(end, at + self._block_size) - start]), ahead=True)

    def load(self, start: int, end: int) -> None:
        """Bytes [start, end) fetched into the block cache (those missing in merged requests) and waited for: a
        reader that then reads them under a lock (pyarrow's file, one per process) holds it for no round trip."""
        end = min(end, self._size)
        self.fetch_ahead(start, end, need="now")
        for index in range(start // self._block_size, -(-end // self._block_size)):
            self._block(index)

    def release(self, start: int, end: int) -> None:
        """Bytes [start, end) fetched ahead will not be read by the reader that asked for them: they no longer
        count as ahead (see BlockCache.release)."""
        self._storage.blocks.release(self.key, start // self._block_size, -(-end // self._block_size))

    def _block(self, index: int) -> bytes:
        start = index * self._block_size
        end = min(self._size, start + self._block_size)
        return self._storage.blocks.get((self.key, index), lambda: self.fetch_range(start, end))

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if (end - 1) // self._block_size > self._pos // self._block_size:
            # several blocks (a parquet footer or column chunk): those missing in one request, not one round trip
            # after another
            self.fetch_ahead(self._pos, end, need="now")
        # Slices of memoryviews, joined once: a decoder's 64 KiB reads straddle two blocks, copied once, not twice.
        parts = []
        while self._pos < end:
            index, offset = divmod(self._pos, self._block_size)
            chunk = memoryview(self._block(index))[offset : offset + (end - self._pos)]
            parts.append(chunk)
            self._pos += len(chunk)
        return b"".join(parts)

    def download(self, out: Writable) -> None:
        """Write the whole file to `out`, a window of blocks at a time fetched concurrently (each request
        retried); the window is a quarter of the read buffer so its blocks stay cached until written."""
        window = max(1, self._storage.block_budget // 4 // self._block_size)
        blocks = -(-self._size // self._block_size)
        for first in range(0, blocks, window):
            stop = min(blocks, first + window)
            self.fetch_ahead(first * self._block_size, stop * self._block_size, need="now")
            for index in range(first, stop):
                out.write(self._block(index))

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
