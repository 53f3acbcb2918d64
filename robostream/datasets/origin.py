"""Where a dataset comes from: the root a user names (or lerobot's cache folder for a repo_id), its metadata,
and the episode selection. Shared by the map-style and the streaming dataset."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from robostream.format.depth import DepthUnit
from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.storage.options import ReadOptions
from robostream.storage.redact import redact_url
from robostream.storage.store import SharedReading
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
    if video_backend not in (None, *BACKENDS):
        raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
    if root is None:
        if repo_id is None:
            raise ValueError(f"{who} needs root= (a local folder or URL) or repo_id=")
        local = default_root(repo_id)
        root = local if revision is None and (local / "meta" / "info.json").is_file() else hub_root(repo_id, revision)
    return load_metadata(root, read_options=read_options, shared=shared_reading, depth_unit=depth_output_unit)
