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

from robostream.array_file import read_arrays
from robostream.convert.faults import crash_point
from robostream.convert.manifest import read_json, save_arrays, write_json_atomic
from robostream.convert.plan import FileTask, file_tasks
from robostream.convert.probe import probe_episodes
from robostream.errors import DatasetFormatError, RobostreamError, UnsafePathError
from robostream.format.info import FPS_RELATIVE_TOLERANCE, feature_frame_size
from robostream.format.v21 import V21Dataset, input_file, read_episode_stats, read_v21

PLAN_VERSION = 3  # 3: probes and episode stats in array files (array_file.py)
PROBE_BATCH = 64  # episodes per pool job
# Probing runs ~2,000 files/s in one process; below this many episodes a process pool costs more to start (its
# processes import pyarrow and PyAV, beside the conversion workers already starting) than it saves.
PROBE_POOL_MIN_EPISODES = 2_000
MAX_LISTED = 20  # problems printed in one error


DATA_COLUMNS = ("bytes", "uncompressed_mb", "rows")
VIDEO_COLUMNS = ("bytes", "duration_s", "frames")


@dataclass(frozen=True)
class ConversionPlan:
    """What planning found and decided: the work dir's plan.json (scalars) and probes.arrays (per-episode columns,
    a few arrays, so a worker's memory for the plan is ~8 bytes per episode and file, not a JSON object each)."""

    source: str
    fingerprint: str  # of the input metadata and the options: a work dir only resumes the same conversion
    data_limit_mb: float
    video_limit_mb: float
    data: dict[str, np.ndarray]  # per episode: bytes, uncompressed_mb, rows
    videos: dict[str, dict[str, np.ndarray]]  # per camera, per episode: bytes, duration_s, frames
    codecs: dict[str, str]  # per camera (the same for all its episodes: preflight checks it)

    @property
    def episodes(self) -> int:
        return len(self.data["rows"])

    @property
    def tasks(self) -> list[FileTask]:
        # Python floats in, as lerobot sums them: the cut points depend on the exact float arithmetic.
        return file_tasks(
            self.data["uncompressed_mb"].tolist(),
            {k: (v["bytes"] / 1024**2).tolist() for k, v in self.videos.items()},
            data_limit_mb=self.data_limit_mb,
            video_limit_mb=self.video_limit_mb,
        )

    def save(self, plan_path: Path) -> None:
        """probes.arrays first, then plan.json (atomically): a plan.json on disk always has its probes beside it."""
        arrays = {f"data/{c}": self.data[c] for c in DATA_COLUMNS}
        arrays.update({f"videos/{k}/{c}": v[c] for k, v in self.videos.items() for c in VIDEO_COLUMNS})
        save_arrays(plan_path.with_name("probes.arrays"), arrays)
        write_json_atomic(
            plan_path,
            {
                "version": PLAN_VERSION,
                "source": self.source,
                "fingerprint": self.fingerprint,
                "data_limit_mb": self.data_limit_mb,
                "video_limit_mb": self.video_limit_mb,
                "codecs": self.codecs,
            },
        )

    @classmethod
    def load(cls, plan_path: Path) -> ConversionPlan | None:
        doc = read_json(plan_path)
        if doc is None:
            return None
        if doc.get("version") != PLAN_VERSION:
            raise RobostreamError(
                f"{plan_path}: planned by another version of robostream (plan version {doc.get('version')}, this "
                f"one reads {PLAN_VERSION}); remove {plan_path.parent} or choose another --work-dir"
            )
        arrays = read_arrays(plan_path.with_name("probes.arrays"))
        data = {c: arrays[f"data/{c}"] for c in DATA_COLUMNS}
        videos = {k: {c: arrays[f"videos/{k}/{c}"] for c in VIDEO_COLUMNS} for k in doc["codecs"]}
        return cls(
            doc["source"], doc["fingerprint"], doc["data_limit_mb"], doc["video_limit_mb"], data, videos, doc["codecs"]
        )


def fingerprint(root: Path, data_limit_mb: float, video_limit_mb: float) -> str:
    """Hash of the v2.1 metadata files and the size limits (what determines the output)."""
    digest = hashlib.sha256(f"{data_limit_mb!r}/{video_limit_mb!r}".encode())
    for name in ("meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl", "meta/episodes_stats.jsonl"):
        digest.update(input_file(root, name).read_bytes())
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
            try:
                present = dataset.path(rel).is_file()
            except UnsafePathError as exc:
                problems.append(str(exc))
                continue
            if not present:
                problems.append(f"{root / rel}: missing (episode {episode.episode_index})")
    for top in ("data", "videos"):
        for path in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in expected:
                problems.append(
                    f"{path}: stray file that no episode of meta/episodes.jsonl owns; move it out of "
                    "the dataset (lerobot's converter would pair it with the wrong episode)"
                )
    return problems


def _probe_problems(dataset: V21Dataset, data: list[dict | None], videos: dict[str, list[dict | None]]) -> list[str]:
    problems = []
    for episode, probe in zip(dataset.episodes, data):
        if probe is not None and probe["rows"] != episode.length:
            problems.append(
                f"{dataset.root / dataset.data_file(episode.episode_index)}: {probe['rows']} rows, but "
                f"meta/episodes.jsonl says episode {episode.episode_index} has {episode.length} frames"
            )
    fps = dataset.info["fps"]
    size = {key: feature_frame_size(dataset.info["features"][key]) for key in videos}
    for key, probes in videos.items():
        first: dict | None = None  # the camera's first readable file
        for episode, probe in zip(dataset.episodes, probes):
            if probe is None:
                continue
            if first is None:
                first = probe
            path = dataset.root / dataset.video_file(episode.episode_index, key)
            if probe["frames"] and probe["frames"] != episode.length:
                problems.append(
                    f"{path}: {probe['frames']} frames, but meta/episodes.jsonl says episode "
                    f"{episode.episode_index} has {episode.length}"
                )
            if abs(probe["fps"] - fps) > FPS_RELATIVE_TOLERANCE * fps:
                problems.append(
                    f"{path}: runs at {probe['fps']:g} fps, but meta/info.json says the dataset's fps is "
                    f"{fps}; its frames would be looked up at the wrong times: re-encode it"
                )
            declared = size[key]
            if declared is not None and (probe["height"], probe["width"]) != declared:
                problems.append(
                    f"{path}: frames of {probe['height']}x{probe['width']} (height x width), but "
                    f"meta/info.json declares {declared[0]}x{declared[1]} for {key!r}"
                )
            shape = [(p["codec"], p["width"], p["height"], p["pix_fmt"]) for p in (first, probe)]
            if shape[0] != shape[1]:
                problems.append(
                    f"{path}: {shape[1]} (codec, width, height, pix_fmt) differs from the first "
                    f"episode's {shape[0]}; a camera's files are joined by stream copy and must match"
                )
    return problems


def _raise_problems(root: Path, problems: list[str]) -> None:
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise DatasetFormatError(
            f"{root}: cannot convert, {len(problems)} problem(s); nothing was written:\n  {listed}{more}"
        )


def make_plan(
    root: str | Path, *, data_limit_mb: float, video_limit_mb: float, workers: int = 1
) -> tuple[V21Dataset, ConversionPlan, dict[str, dict[str, np.ndarray]]]:
    """Preflight the dataset at `root` and plan its conversion (reads metadata, footers and mp4 headers only).

    Returns the metadata, the plan and the per-episode stats stacked ({feature: {stat: (episodes, ...)}}), parsed
    now so that bad stats are refused before anything is written."""
    dataset = read_v21(root)
    stats = read_episode_stats(dataset.root, len(dataset.episodes))
    _raise_problems(dataset.root, _listing_problems(dataset))
    indices = [e.episode_index for e in dataset.episodes]
    batches = [indices[i : i + PROBE_BATCH] for i in range(0, len(indices), PROBE_BATCH)]
    jobs = [
        (
            str(dataset.root),
            [dataset.data_file(e) for e in batch],
            {k: [dataset.video_file(e, k) for e in batch] for k in dataset.video_keys},
        )
        for batch in batches
    ]
    data: list[dict | None] = []  # None: an unreadable file (named in the problems)
    videos: dict[str, list[dict | None]] = {k: [] for k in dataset.video_keys}
    if workers > 1 and len(indices) >= PROBE_POOL_MIN_EPISODES:
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
    # every file was readable, else the problems above stopped the plan
    data_probes = [d for d in data if d is not None]
    video_probes = {k: [p for p in ps if p is not None] for k, ps in videos.items()}
    crash_point("planned")
    plan = ConversionPlan(
        str(dataset.root.resolve()),
        fingerprint(dataset.root, data_limit_mb, video_limit_mb),
        data_limit_mb,
        video_limit_mb,
        {c: np.array([d[c] for d in data_probes]) for c in DATA_COLUMNS},
        {k: {c: np.array([p[c] for p in ps]) for c in VIDEO_COLUMNS} for k, ps in video_probes.items()},
        {k: ps[0]["codec"] for k, ps in video_probes.items() if ps},
    )
    return dataset, plan, stats


def preflight_report(dataset: V21Dataset, plan: ConversionPlan) -> dict[str, Any]:
    """What the conversion will read and write."""
    tasks = plan.tasks
    return {
        "source": plan.source,
        "episodes": len(dataset.episodes),
        "frames": int(plan.data["rows"].sum()),
        "cameras": dataset.video_keys,
        "image_features": dataset.image_keys,
        "input_bytes": int(plan.data["bytes"].sum() + sum(v["bytes"].sum() for v in plan.videos.values())),
        "data_files": sum(t.kind == "data" for t in tasks),
        "video_files": {k: sum(t.video_key == k for t in tasks) for k in dataset.video_keys},
        "codecs": plan.codecs,
    }
