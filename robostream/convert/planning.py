"""Preflight and planning: check a v2.1 dataset end to end from metadata alone, then fix every output file.

Every inconsistency is collected (not just the first) and reported with the file it concerns, before anything is
written: gapped or repeated episode indices, row or frame counts that disagree with episodes.jsonl, missing or
stray files, cameras whose mp4s differ in codec, size or pixel format (a stream copy cannot join those).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robostream.convert.faults import crash_point
from robostream.convert.plan import FileTask, file_tasks
from robostream.convert.probe import probe_episodes
from robostream.errors import DatasetFormatError
from robostream.format.v21 import V21Dataset, read_episode_stats, read_v21

PLAN_VERSION = 1
PROBE_BATCH = 64  # episodes per pool job
MAX_LISTED = 20  # problems printed in one error


@dataclass(frozen=True)
class ConversionPlan:
    """What planning found and decided; saved as the work dir's plan.json."""

    source: str
    fingerprint: str  # of the input metadata and the options: a work dir only resumes the same conversion
    data_limit_mb: float
    video_limit_mb: float
    data: list[dict[str, Any]]  # per episode: bytes, uncompressed_mb, rows
    videos: dict[str, list[dict[str, Any]]]  # per camera, per episode: bytes, duration_s, frames, codec, ...

    @property
    def tasks(self) -> list[FileTask]:
        return file_tasks([d["uncompressed_mb"] for d in self.data],
                          {k: [v["bytes"] / 1024 ** 2 for v in vs] for k, vs in self.videos.items()},
                          data_limit_mb=self.data_limit_mb, video_limit_mb=self.video_limit_mb)

    def to_json(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "source": self.source, "fingerprint": self.fingerprint,
                "data_limit_mb": self.data_limit_mb, "video_limit_mb": self.video_limit_mb,
                "data": self.data, "videos": self.videos}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ConversionPlan:
        return cls(doc["source"], doc["fingerprint"], doc["data_limit_mb"], doc["video_limit_mb"], doc["data"],
                   doc["videos"])


def fingerprint(root: Path, data_limit_mb: float, video_limit_mb: float) -> str:
    """Hash of the v2.1 metadata files and the size limits (what determines the output)."""
    digest = hashlib.sha256(f"{data_limit_mb!r}/{video_limit_mb!r}".encode())
    for name in ("meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl", "meta/episodes_stats.jsonl"):
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def _listing_problems(dataset: V21Dataset) -> list[str]:
    """Missing per-episode files, and files under data/ or videos/ that no episode owns."""
    root = dataset.root
    expected = set()
    problems = []
    for episode in dataset.episodes:
        wanted = [dataset.data_file(episode.episode_index)]
        wanted += [dataset.video_file(episode.episode_index, key) for key in dataset.video_keys]
        for rel in wanted:
            expected.add(rel)
            if not (root / rel).is_file():
                problems.append(f"{root / rel}: missing (episode {episode.episode_index})")
    for top in ("data", "videos"):
        for path in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in expected:
                problems.append(f"{path}: stray file that no episode of meta/episodes.jsonl owns; move it out of "
                                "the dataset (lerobot's converter would pair it with the wrong episode)")
    return problems


def _probe_problems(dataset: V21Dataset, data: list[dict], videos: dict[str, list[dict]]) -> list[str]:
    problems = []
    for episode, probe in zip(dataset.episodes, data):
        if probe is not None and probe["rows"] != episode.length:
            problems.append(f"{dataset.root / dataset.data_file(episode.episode_index)}: {probe['rows']} rows, but "
                            f"meta/episodes.jsonl says episode {episode.episode_index} has {episode.length} frames")
    for key, probes in videos.items():
        first = next((p for p in probes if p is not None), None)
        for episode, probe in zip(dataset.episodes, probes):
            if probe is None:
                continue
            path = dataset.root / dataset.video_file(episode.episode_index, key)
            if probe["frames"] and probe["frames"] != episode.length:
                problems.append(f"{path}: {probe['frames']} frames, but meta/episodes.jsonl says episode "
                                f"{episode.episode_index} has {episode.length}")
            shape = [(p["codec"], p["width"], p["height"], p["pix_fmt"]) for p in (first, probe)]
            if shape[0] != shape[1]:
                problems.append(f"{path}: {shape[1]} (codec, width, height, pix_fmt) differs from the first "
                                f"episode's {shape[0]}; a camera's files are joined by stream copy and must match")
    return problems


def _raise_problems(root: Path, problems: list[str]) -> None:
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise DatasetFormatError(f"{root}: cannot convert, {len(problems)} problem(s); nothing was written:\n  "
                                 f"{listed}{more}")


def make_plan(root: str | Path, *, data_limit_mb: float, video_limit_mb: float, workers: int = 1
              ) -> tuple[V21Dataset, ConversionPlan, dict[str, dict[str, np.ndarray]]]:
    """Preflight the dataset at `root` and plan its conversion (reads metadata, footers and mp4 headers only).

    Returns the metadata, the plan and the per-episode stats stacked ({feature: {stat: (episodes, ...)}}), parsed
    now so that bad stats are refused before anything is written."""
    dataset = read_v21(root)
    stats = read_episode_stats(dataset.root, len(dataset.episodes))
    _raise_problems(dataset.root, _listing_problems(dataset))
    indices = [e.episode_index for e in dataset.episodes]
    batches = [indices[i:i + PROBE_BATCH] for i in range(0, len(indices), PROBE_BATCH)]
    jobs = [(str(dataset.root), [dataset.data_file(e) for e in batch],
             {k: [dataset.video_file(e, k) for e in batch] for k in dataset.video_keys}) for batch in batches]
    data: list[dict] = []
    videos: dict[str, list[dict]] = {k: [] for k in dataset.video_keys}
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(probe_episodes, *zip(*jobs)))
    else:
        results = [probe_episodes(*job) for job in jobs]
    unreadable: list[str] = []
    for batch_data, batch_videos, batch_problems in results:
        data += batch_data
        for key, probes in batch_videos.items():
            videos[key] += probes
        unreadable += batch_problems
    _raise_problems(dataset.root, unreadable + _probe_problems(dataset, data, videos))
    crash_point("planned")
    plan = ConversionPlan(str(dataset.root.resolve()), fingerprint(dataset.root, data_limit_mb, video_limit_mb),
                          data_limit_mb, video_limit_mb, data, videos)
    return dataset, plan, stats


def preflight_report(dataset: V21Dataset, plan: ConversionPlan) -> dict[str, Any]:
    """What the conversion will read and write."""
    tasks = plan.tasks
    return {
        "source": plan.source,
        "episodes": len(dataset.episodes),
        "frames": sum(d["rows"] for d in plan.data),
        "cameras": dataset.video_keys,
        "image_features": dataset.image_keys,
        "input_bytes": sum(d["bytes"] for d in plan.data) + sum(v["bytes"] for vs in plan.videos.values() for v in vs),
        "data_files": sum(t.kind == "data" for t in tasks),
        "video_files": {k: sum(t.video_key == k for t in tasks) for k in dataset.video_keys},
        "codecs": {k: vs[0]["codec"] for k, vs in plan.videos.items() if vs},
    }
