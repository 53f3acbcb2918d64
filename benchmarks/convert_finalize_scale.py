"""What the converter's serial parts cost at 100k episodes: reading the v2.1 metadata, cutting files (the plan),
and finalize (episodes table, tasks, aggregated stats, info), the parts that do not parallelise over machines.

Writes a metadata-only v2.1 dataset (info.json and the three JSON-lines files, no data or video; stats shaped like
a 3-camera, 14-dof recording) and a plan with per-episode sizes and durations as probing would record them, then
times, in this process:
  * read: `read_v21` (parse and cross-check the JSON-lines metadata);
  * plan: `ConversionPlan.tasks` (cut points for data and every camera);
  * finalize: parsing episodes_stats.jsonl (the converter does it once, at planning, and keeps the arrays in the
    work dir) and `write_metadata` (episodes table, tasks.parquet, stats.json, info.json into a staging folder);
and reports the peak RSS and the episodes table's size (lerobot 0.6.1 refuses to read one above 100 MiB).

    .venv/bin/python benchmarks/convert_finalize_scale.py --episodes 100000 --work /tmp/finalize-scale
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np

from robostream.convert.finalize import write_metadata
from robostream.convert.planning import ConversionPlan
from robostream.format.v21 import V21_DATA_PATH, V21_VIDEO_PATH, read_episode_stats, read_v21

CAMERAS = ("observation.images.cam0", "observation.images.cam1", "observation.images.cam2")
DOF = 14


def _stats(rng: np.random.Generator, length: int) -> dict:
    def vec(n):
        return {
            "min": rng.random(n).tolist(),
            "max": rng.random(n).tolist(),
            "mean": rng.random(n).tolist(),
            "std": rng.random(n).tolist(),
            "count": [length],
        }

    stats = {"observation.state": vec(DOF), "action": vec(DOF)}
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        stats[name] = vec(1)
    for camera in CAMERAS:
        stats[camera] = {k: [[[float(x)]] for x in rng.random(3)] for k in ("min", "max", "mean", "std")}
        stats[camera]["count"] = [length]
    return stats


def write_metadata_only(root: Path, episodes: int) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(200, 400, size=episodes)
    (root / "meta").mkdir(parents=True)
    features = {
        "observation.state": {"dtype": "float32", "shape": [DOF], "names": None},
        "action": {"dtype": "float32", "shape": [DOF], "names": None},
    }
    for camera in CAMERAS:
        features[camera] = {
            "dtype": "video",
            "shape": [480, 640, 3],
            "names": ["height", "width", "channels"],
            "info": {"video.fps": 30, "video.codec": "av1"},
        }
    for name in ("timestamp",):
        features[name] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    info = {
        "codebase_version": "v2.1",
        "robot_type": "bench",
        "total_episodes": episodes,
        "total_frames": int(lengths.sum()),
        "total_tasks": 10,
        "total_videos": episodes * 3,
        "total_chunks": -(-episodes // 1000),
        "chunks_size": 1000,
        "fps": 30,
        "splits": {"train": f"0:{episodes}"},
        "data_path": V21_DATA_PATH,
        "video_path": V21_VIDEO_PATH,
        "features": features,
    }
    (root / "meta/info.json").write_text(json.dumps(info))
    with (root / "meta/tasks.jsonl").open("w") as f:
        for t in range(10):
            f.write(json.dumps({"task_index": t, "task": f"task number {t}"}) + "\n")
    with (root / "meta/episodes.jsonl").open("w") as f, (root / "meta/episodes_stats.jsonl").open("w") as g:
        for e, n in enumerate(lengths.tolist()):
            f.write(json.dumps({"episode_index": e, "tasks": [f"task number {e % 10}"], "length": n}) + "\n")
            g.write(json.dumps({"episode_index": e, "stats": _stats(rng, n)}) + "\n")


def fake_plan(root: Path, episodes: int) -> ConversionPlan:
    rng = np.random.default_rng(1)
    lengths = np.array([e.length for e in read_v21(root).episodes])
    data_bytes = rng.integers(30_000, 60_000, size=episodes)
    data = {"bytes": data_bytes, "uncompressed_mb": data_bytes / 2**20 * 1.5, "rows": lengths}
    videos = {
        c: {"bytes": rng.integers(2_000_000, 4_000_000, size=episodes), "duration_s": lengths / 30, "frames": lengths}
        for c in CAMERAS
    }
    return ConversionPlan(str(root), "bench", 100, 200, data, videos, {c: "av1" for c in CAMERAS})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/robostream-finalize-scale"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    root = args.work / "v21"
    write_metadata_only(root, args.episodes)
    plan = fake_plan(root, args.episodes)
    started = time.perf_counter()
    dataset = read_v21(root)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    tasks = plan.tasks
    plan_s = time.perf_counter() - started
    started = time.perf_counter()
    write_metadata(
        args.work / "staging", args.work / "tmp", dataset, plan, tasks, read_episode_stats(root, args.episodes)
    )
    finalize_s = time.perf_counter() - started
    table = next((args.work / "staging/meta/episodes").rglob("*.parquet"))
    print(
        json.dumps(
            {
                "episodes": args.episodes,
                "files": len(tasks),
                "read_v21_s": round(read_s, 2),
                "plan_s": round(plan_s, 3),
                "finalize_s": round(finalize_s, 2),
                "episodes_table_mb": round(table.stat().st_size / 2**20, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0),
                "metadata_jsonl_mb": round(sum(p.stat().st_size for p in (root / "meta").iterdir()) / 2**20, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
