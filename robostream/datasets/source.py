"""Where a dataset comes from: the root a user names (or lerobot's cache folder for a repo_id), its metadata,
and the episode selection. Shared by the map-style and the streaming dataset."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from robostream.format.metadata import DatasetMetadata, load_metadata
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


def open_dataset(repo_id: str | None, root: str | Path | None, video_backend: str | None, who: str) -> DatasetMetadata:
    """Check the arguments every dataset class shares and load the metadata."""
    if root is None:
        if repo_id is None:
            raise ValueError(f"{who} needs root= (a local dataset folder) or repo_id=")
        root = default_root(repo_id)
    if video_backend not in (None, *BACKENDS):
        raise ValueError(f"video_backend={video_backend!r}: expected one of {BACKENDS} or None (torchcodec)")
    return load_metadata(root)
