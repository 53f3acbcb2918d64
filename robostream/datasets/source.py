"""Where a dataset comes from: the root a user names (or lerobot's cache folder for a repo_id), its metadata,
and the episode selection. Shared by the map-style and the streaming dataset."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.storage.cache import DiskCache, parse_size
from robostream.storage.retry import RetryPolicy
from robostream.storage.source import DEFAULT_BLOCK_BUDGET
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
    chosen = sorted({int(e) for e in episodes})
    unknown = [e for e in chosen if e not in set(available.tolist())]
    if unknown:
        raise ValueError(f"episodes={unknown[:10]} not in {meta.root} (it has episodes 0..{len(available) - 1})")
    if not chosen:
        raise ValueError("episodes= selects no episode")
    return chosen


def hub_root(repo_id: str, revision: str | None) -> str:
    """hf:// URL of a Hub dataset pinned to one commit, so tables and videos always come from the same revision."""
    from huggingface_hub import HfApi

    sha = HfApi().dataset_info(repo_id, revision=revision or "main").sha
    return f"hf://datasets/{repo_id}@{sha}"


def open_dataset(repo_id: str | None, root: str | Path | None, video_backend: str | None, who: str,
                 revision: str | None = None, storage_options: dict[str, Any] | None = None,
                 data_files_root: str | Path | None = None, retry: RetryPolicy | None = None,
                 cache_dir: str | Path | None = None, cache_limit: int | str | None = None,
                 read_buffer: int | str = DEFAULT_BLOCK_BUDGET) -> DatasetMetadata:
    """Check the arguments every dataset class shares and load the metadata.

    root: a local folder or an fsspec URL (hf://datasets/<repo>[@rev], hf://buckets/..., s3://, http(s)://,
    file://). Without root, repo_id names a dataset: lerobot's local copy when there is one (and no revision was
    asked for), else the Hub, pinned to the commit `revision` resolves to. data_files_root: where data and video
    files are read from, when not beside the metadata. retry: timeouts and retries of remote reads.
    cache_dir + cache_limit (bytes or e.g. "20gb"): keep whole remote data/video files on local disk, shared by
    all processes of the node, least recently used evicted first. read_buffer (bytes or e.g. "128mb"): fetched
    remote blocks kept in memory per process, prefetched ones included (bounds remote-read memory).
    """
    if (cache_dir is None) != (cache_limit is None):
        raise ValueError("pass both cache_dir= and cache_limit= to use the disk cache, or neither")
    cache = DiskCache(cache_dir, cache_limit) if cache_dir is not None else None
    if video_backend not in (None, *BACKENDS):
        raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
    if root is None:
        if repo_id is None:
            raise ValueError(f"{who} needs root= (a local folder or URL) or repo_id=")
        local = default_root(repo_id)
        root = local if revision is None and (local / "meta" / "info.json").is_file() else hub_root(repo_id, revision)
    return load_metadata(root, storage_options=storage_options, data_files_root=data_files_root, retry=retry,
                         cache=cache, read_buffer_bytes=parse_size(read_buffer))
