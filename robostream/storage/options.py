"""How a dataset's bytes are read (`ReadOptions`), passed whole from the user's arguments to the storage that reads
them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from robostream.storage.cache import DiskCache, parse_size
from robostream.storage.derived import DerivedCache, default_directory
from robostream.storage.integrity import check_validate
from robostream.storage.read_ahead import DEFAULT_MAX_IN_FLIGHT
from robostream.storage.retry import RetryPolicy

DEFAULT_READ_BUFFER = 128 << 20  # fetched bytes kept per process (reads + read-ahead)


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How a dataset's bytes are read: shared by both datasets and the benchmark (where they are read from is the
    dataset's `repo_id` / `root` / `revision`).

    Columns derived from the tables (the episode table's locating columns; for map-style reads the data columns
    as raw bytes read by offset) are kept once per node in `cache_dir/derived`, else $ROBOSTREAM_CACHE, else
    ~/.cache/robostream: about the size of the uncompressed tables, never the videos. A cache folder other users
    may write to (mode 1777, group-writable) holds each user's entries in a subfolder `<uid>` of their own
    (storage/cache_folder.py); one this user cannot write to is an error naming it.

    Args:
        data_files_root: read data and video files from here (e.g. a storage bucket) while the metadata comes from
            root/repo_id. None: beside the metadata.
        storage_options: passed to fsspec for remote roots (endpoints, credentials, headers).
        retry: timeouts and retries of remote reads (default RetryPolicy()).
        cache_dir: keep whole remote data/video files on this local disk folder, shared by every process of the
            node (with cache_limit). Costs disk, saves refetching files across epochs and processes. Its
            `derived/` subfolder then also holds the columns derived from the tables (see below).
        cache_limit: bytes (or e.g. "20gb") the disk cache may hold; least recently used files are evicted.
        read_buffer: fetched remote blocks kept in memory per process, those fetched ahead included (bytes or e.g.
            "128mb"): bounds remote-read memory; too small and readers wait for refetches. None (default): 128 MiB,
            grown by a streaming pass to 6 blocks for each camera of its live pieces where that is more (the
            read-ahead's working set: each keeps its next bytes fetched ahead; with less than 4 blocks each, decoders
            wait a round trip per decode). A size given is kept, and a pass short of 4 blocks each warns.
        max_in_flight: range requests a process keeps under way at once when fetching ahead (default 64): enough
            for a map-style worker at 50-100 ms per request; lower it for a store that throttles connections.
        validate: "size" (default) checks every file's size, and that range reads of S3/HTTP files all see the
            version (ETag) the first read saw. "full" also hashes each whole file entering the disk cache (needs
            cache_dir) against the hash its host publishes (Hub sha256 or git sha1; S3 ETag if a plain MD5), fetches
            a mismatching file once more, then fails naming both hashes: about a second of CPU per GB cached.
    """

    data_files_root: str | Path | None = None
    storage_options: dict[str, Any] | None = None
    retry: RetryPolicy | None = None
    cache_dir: str | Path | None = None
    cache_limit: int | str | None = None
    read_buffer: int | str | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    validate: Literal["size", "full"] = "size"

    def __post_init__(self) -> None:
        if (self.cache_dir is None) != (self.cache_limit is None):
            raise ValueError("pass both cache_dir= and cache_limit= to use the disk cache, or neither")
        if self.read_buffer is not None:
            parse_size(self.read_buffer)  # fails now, naming the value, rather than at the first remote read
        if isinstance(self.max_in_flight, bool) or not isinstance(self.max_in_flight, int) or self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={self.max_in_flight!r}: expected a positive number of requests")
        check_validate(self.validate, cached=self.cache_dir is not None)

    # What the fields give the storage, derived here only.
    @property
    def read_buffer_bytes(self) -> int:
        """`read_buffer` in bytes (to begin with, where it may grow: `read_buffer_grows`)."""
        return DEFAULT_READ_BUFFER if self.read_buffer is None else parse_size(self.read_buffer)

    @property
    def read_buffer_grows(self) -> bool:
        """Whether a streaming pass may grow the read buffer to its live pieces' working set (none was given)."""
        return self.read_buffer is None

    @property
    def retry_policy(self) -> RetryPolicy:
        """`retry`, else the default RetryPolicy()."""
        return self.retry or RetryPolicy()

    def disk_cache(self) -> DiskCache | None:
        """The node's disk cache of whole remote files in `cache_dir` (None: no cache_dir); its folder is made and
        checked now."""
        if self.cache_dir is None or self.cache_limit is None:
            return None
        return DiskCache(self.cache_dir, self.cache_limit)

    def derived_cache(self) -> DerivedCache:
        """The node's folders derived from the tables, in `cache_dir/derived`, else $ROBOSTREAM_CACHE, else
        ~/.cache/robostream. A new object each call: each checks an entry the first time it opens it (a dataset
        constructed again sees an entry damaged since)."""
        cache = self.disk_cache()
        return DerivedCache(cache.directory / "derived" if cache is not None else default_directory())


def read_options_from(value: ReadOptions | Mapping[str, Any] | None, *, where: str) -> ReadOptions | None:
    """`read_options` as given: a ReadOptions, None, or its fields as a mapping (a mixture file's JSON/YAML object;
    its `retry` then a mapping of RetryPolicy's fields), unknown keys refused naming them."""
    if value is None or isinstance(value, ReadOptions):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected a ReadOptions or a mapping of its fields, got {value!r}")
    fields = dict(value)
    retry = fields.get("retry")
    if isinstance(retry, Mapping):
        fields["retry"] = _dataclass_from(RetryPolicy, retry, where=f"{where}['retry']")
    elif retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"{where}['retry']: expected a RetryPolicy or a mapping of its fields, got {retry!r}")
    return _dataclass_from(ReadOptions, fields, where=where)


def _dataclass_from(cls: type, fields: Mapping[str, Any], *, where: str) -> Any:
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = [k for k in fields if k not in known]
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; {cls.__name__} takes {known}")
    return cls(**fields)
