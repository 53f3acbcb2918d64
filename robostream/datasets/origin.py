"""Where a dataset comes from: the root a user names (or lerobot's cache folder for a repo_id), its metadata,
and the episode selection. Shared by the map-style and the streaming dataset."""

from __future__ import annotations

import dataclasses
import operator
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robostream.format.depth import DepthUnit
from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.storage.cache import DiskCache, parse_size
from robostream.storage.derived import DerivedCache, default_directory
from robostream.storage.integrity import check_validate
from robostream.storage.read_ahead import DEFAULT_MAX_IN_FLIGHT
from robostream.storage.redact import redact_url
from robostream.storage.retry import RetryPolicy
from robostream.storage.store import DEFAULT_BLOCK_BUDGET, SharedReading
from robostream.video.decoder import BACKENDS


def default_root(repo_id: str) -> Path:
    """Where lerobot keeps a downloaded dataset: $HF_LEROBOT_HOME/<repo_id> (default ~/.cache/huggingface/lerobot)."""
    home = os.environ.get("HF_LEROBOT_HOME") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "lerobot"
    return Path(home).expanduser() / repo_id


def resolve_episodes(meta: DatasetMetadata, episodes: Sequence[int] | None) -> list[int]:
    """The selected episode indices, sorted and checked against the dataset."""
    available = meta.episodes.episode_index
    if episodes is None:
        return [int(e) for e in available]
    # A string is a sequence of characters ("01" would read episodes 0 and 1) and a bool an int (True: episode 1):
    # only integers select episodes.
    if isinstance(episodes, (str, bytes)) or not isinstance(episodes, Iterable):
        raise TypeError(f"episodes={episodes!r}: expected a list (or range, array) of episode indices")
    chosen_set = set()
    for e in episodes:
        if isinstance(e, (bool, np.bool_)) or not hasattr(e, "__index__"):
            raise TypeError(f"episodes: {e!r} ({type(e).__name__}) is not an episode index; pass integers")
        chosen_set.add(operator.index(e))
    chosen = sorted(chosen_set)
    unknown = [e for e, known in zip(chosen, np.isin(chosen, available)) if not known]
    if unknown:
        raise ValueError(
            f"episodes={unknown[:10]} not in {redact_url(meta.root)} (it has episodes 0..{len(available) - 1})"
        )
    if not chosen:
        raise ValueError("episodes= selects no episode")
    return chosen


def hub_root(repo_id: str, revision: str | None) -> str:
    """hf:// URL of a Hub dataset pinned to one commit, so tables and videos always come from the same revision."""
    from huggingface_hub import HfApi

    sha = HfApi().dataset_info(repo_id, revision=revision or "main").sha
    return f"hf://datasets/{repo_id}@{sha}"


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How a dataset's bytes are read: shared by both datasets and the benchmark (where they are read from is the
    dataset's `repo_id` / `root` / `revision`).

    Columns derived from the tables (the episode table's locating columns; for map-style reads the data columns
    as memory-mapped .npy) are kept once per node in `cache_dir/derived`, else $ROBOSTREAM_CACHE, else
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
            "128mb"): bounds remote-read memory; too small and readers wait for refetches.
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
    read_buffer: int | str = DEFAULT_BLOCK_BUDGET
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    validate: Literal["size", "full"] = "size"

    def __post_init__(self) -> None:
        if (self.cache_dir is None) != (self.cache_limit is None):
            raise ValueError("pass both cache_dir= and cache_limit= to use the disk cache, or neither")
        parse_size(self.read_buffer)  # fails now, naming the value, rather than at the first remote read
        if isinstance(self.max_in_flight, bool) or not isinstance(self.max_in_flight, int) or self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={self.max_in_flight!r}: expected a positive number of requests")
        check_validate(self.validate, cached=self.cache_dir is not None)


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


class SourceOptions(ReadOptions):
    """The old name of ReadOptions (same arguments), kept for one release with a warning."""

    def __post_init__(self) -> None:
        warnings.warn(
            "SourceOptions is now called ReadOptions (same arguments); the old name goes in the next release",
            FutureWarning,
            stacklevel=3,
        )
        super().__post_init__()


def renamed(old: str, new: str, old_value: Any, new_value: Any, *, who: str, stacklevel: int = 3) -> Any:
    """The value of an argument renamed from `old` to `new`: the old name works for one release, with a warning
    naming the new one."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"{who}: pass {new}= only ({old}= is its old name)")
    warnings.warn(
        f"{who}: {old}= is now called {new}=; the old name goes in the next release",
        FutureWarning,
        stacklevel=stacklevel,
    )
    return old_value


def open_dataset(
    repo_id: str | None,
    root: str | Path | None,
    revision: str | None,
    read_options: ReadOptions | None,
    video_backend: str | None,
    who: str,
    *,
    depth_output_unit: DepthUnit,
    shared_reading: SharedReading | None = None,
) -> DatasetMetadata:
    """Check the arguments every dataset class shares and load the metadata (info, episode table, tasks, stats).

    root: a local folder or an fsspec URL (hf://datasets/<repo>[@rev], hf://buckets/..., s3://, http(s)://,
    file://). Without root, repo_id names a dataset: lerobot's local copy when there is one (and no revision was
    asked for), else the Hub, pinned to the commit `revision` resolves to. depth_output_unit: the unit of depth
    cameras and their stats. shared_reading: see load_metadata.
    """
    options = read_options or ReadOptions()
    cache = DiskCache(options.cache_dir, options.cache_limit) if options.cache_dir is not None else None
    if video_backend not in (None, *BACKENDS):
        raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
    if root is None:
        if repo_id is None:
            raise ValueError(f"{who} needs root= (a local folder or URL) or repo_id=")
        local = default_root(repo_id)
        root = local if revision is None and (local / "meta" / "info.json").is_file() else hub_root(repo_id, revision)
    derived = DerivedCache(cache.directory / "derived" if cache is not None else default_directory())
    return load_metadata(
        root,
        storage_options=options.storage_options,
        data_files_root=options.data_files_root,
        retry=options.retry,
        cache=cache,
        read_buffer_bytes=parse_size(options.read_buffer),
        derived=derived,
        validate=options.validate,
        max_in_flight=options.max_in_flight,
        shared_reading=shared_reading,
        depth_unit=depth_output_unit,
    )
