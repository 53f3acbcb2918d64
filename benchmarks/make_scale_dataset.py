"""Generate a large LOCAL LeRobot v3.0 dataset (tens of thousands of episodes, millions of frames) in minutes.

Made for measuring dataset construction cost (start-up time and memory) as a function of dataset size, issue
"Start-up and memory flat in dataset size". Run from the repository root:

    .venv/bin/python benchmarks/make_scale_dataset.py /work/scale/ds20k --episodes 20000 --frames-per-episode 100

The TABLES are written the way lerobot's recorder writes them, at full size:
  * `data/chunk-XXX/file-XXX.parquet`: `--episodes-per-data-file` episodes per file, ONE ROW GROUP PER EPISODE
    (a ParquetWriter and one write_table per episode, as lerobot records), `observation.state` and `action` as
    fixed_size_list<float32>[state_dim], the index columns as plain columns; `index` global and contiguous,
    `frame_index` 0..len-1, `timestamp` = frame_index / fps.
  * `meta/episodes/chunk-000/file-XXX.parquet`: `--episodes-per-meta-file` rows per file, with every column lerobot
    v3.0 writes: episode_index, tasks, length, data/chunk_index, data/file_index, dataset_from_index,
    dataset_to_index, videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}, the per-episode stats
    `stats/<feature>/{min,max,mean,std,count,q01,q10,q50,q90,q99}` of every feature (lists; cameras (3,1,1)
    nested lists), meta/episodes/chunk_index and meta/episodes/file_index, in row groups of 10 episodes (the
    recorder's metadata buffer). About a hundred columns: a real episodes table is wide, and loading it is part of
    what start-up costs.
  * `meta/tasks.parquet` (a pandas frame indexed by the task string), `meta/stats.json` (aggregated with lerobot's
    rules: count-weighted mean, parallel variance, element-wise min/max, count-weighted quantiles),
    `meta/info.json`.

The VIDEOS are NOT realistic: encoding millions of frames is impossible on a small machine, so each camera gets
ONE short real mp4 (`videos/<key>/chunk-000/file-000.mp4`, as many frames as the longest episode) and every other
episode a file of its own that is a hard link to it, its span the file's first frames (from_timestamp 0,
to_timestamp length / fps: the readers refuse two episodes' spans overlapping in one file). Decoding works and
returns correct-looking frames, but a loader sees one small video per episode instead of long files shared by
many: this dataset measures tables and start-up, not video I/O. Camera stats are the true stats of the frames each
episode spans.

Generation is vectorised with numpy (per data file: values, sorted per-episode for the quantiles, reduceat for
mean/std), deterministic in `--seed`, and written into a temporary folder beside OUT that is renamed at the end.
Episode lengths vary uniformly within +-20% of `--frames-per-episode`, nudged so that the total is exactly
episodes x frames-per-episode.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner on every encoder open unless told otherwise
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS = (
    "pick up the red cube and place it in the bin",
    "open the top drawer",
    "push the blue block to the goal",
    "fold the towel in half",
    "stack the green cup on the yellow cup",
    "insert the peg into the hole",
    "wipe the table with the sponge",
    "hand the screwdriver to the person",
)
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


# -- episode layout -------------------------------------------------------------------------------------------------
def episode_lengths(episodes: int, per_episode: int, seed: int) -> np.ndarray:
    """Lengths uniform in [0.8, 1.2] x per_episode, nudged within those bounds to sum to episodes x per_episode."""
    rng = np.random.default_rng([seed, 1])
    low, high = max(1, int(round(per_episode * 0.8))), max(1, int(round(per_episode * 1.2)))
    lengths = rng.integers(low, high + 1, size=episodes).astype(np.int64)
    diff = episodes * per_episode - int(lengths.sum())
    while diff:
        step = 1 if diff > 0 else -1
        free = np.flatnonzero(lengths < high) if step > 0 else np.flatnonzero(lengths > low)
        if not len(free):
            break
        pick = rng.choice(free, size=min(abs(diff), len(free)), replace=False)
        lengths[pick] += step
        diff -= step * len(pick)
    return lengths


# -- statistics -----------------------------------------------------------------------------------------------------
def segment_stats(values: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode stats of consecutive segments of `values` (rows, D): each stat an (episodes, D) float64 array.

    Matches numpy's min/max/mean/std (population) and np.quantile (linear interpolation) per episode, vectorised:
    one sort of the rows keyed by (episode, value) per column.
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(lengths)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    seg = np.repeat(np.arange(n), lengths)
    lo_v, hi_v = values.min(), values.max()
    span = (hi_v - lo_v) + 1.0
    keyed = (values - lo_v) + (seg * span)[:, None]  # sorting keyed values sorts within each episode
    ordered = np.take_along_axis(values, np.argsort(keyed, axis=0, kind="stable"), axis=0)
    total = np.add.reduceat(values, starts, axis=0)
    mean = total / lengths[:, None]
    sq = np.add.reduceat((values - np.repeat(mean, lengths, axis=0)) ** 2, starts, axis=0)
    stats = {
        "min": ordered[starts],
        "max": ordered[starts + lengths - 1],
        "mean": mean,
        "std": np.sqrt(sq / lengths[:, None]),
    }
    for name, q in QUANTILES.items():
        pos = starts + q * (lengths - 1)
        below = np.floor(pos).astype(np.int64)
        above = np.minimum(below + 1, starts + lengths - 1)
        frac = (pos - below)[:, None]
        stats[name] = ordered[below] + (ordered[above] - ordered[below]) * frac
    return stats


def ramp_stats(lengths: np.ndarray, offset: np.ndarray | float = 0.0, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Stats of offset + scale * arange(length) per episode, in closed form (frame_index, timestamp, index)."""
    lengths = lengths.astype(np.float64)
    last = lengths - 1
    offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), lengths.shape)
    stats = {
        "min": offset + 0.0,
        "max": offset + scale * last,
        "mean": offset + scale * last / 2,
        "std": scale * np.sqrt((lengths**2 - 1) / 12),
    }
    for name, q in QUANTILES.items():
        stats[name] = offset + scale * q * last
    return {k: v[:, None] for k, v in stats.items()}


def constant_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)[:, None]
    stats = {"min": values, "max": values, "mean": values, "std": np.zeros_like(values)}
    stats.update({name: values for name in QUANTILES})
    return stats


class Aggregate:
    """Running dataset stats (lerobot's aggregation) of one feature from batches of per-episode stats."""

    def __init__(self) -> None:
        self.count = 0.0
        self.parts: dict[str, np.ndarray] = {}

    def add(self, stats: dict[str, np.ndarray], counts: np.ndarray) -> None:
        w = counts.astype(np.float64).reshape((-1,) + (1,) * (stats["mean"].ndim - 1))
        batch = {
            "min": stats["min"].min(axis=0),
            "max": stats["max"].max(axis=0),
            "sum": (w * stats["mean"]).sum(axis=0),
            "sumsq": (w * (stats["std"] ** 2 + stats["mean"] ** 2)).sum(axis=0),
        }
        batch.update({q: (w * stats[q]).sum(axis=0) for q in QUANTILES})
        if not self.parts:
            self.parts = batch
        else:
            self.parts["min"] = np.minimum(self.parts["min"], batch["min"])
            self.parts["max"] = np.maximum(self.parts["max"], batch["max"])
            for key in ("sum", "sumsq", *QUANTILES):
                self.parts[key] = self.parts[key] + batch[key]
        self.count += float(counts.sum())

    def result(self) -> dict[str, list]:
        mean = self.parts["sum"] / self.count
        var = np.maximum(self.parts["sumsq"] / self.count - mean**2, 0.0)
        out = {
            "min": self.parts["min"],
            "max": self.parts["max"],
            "mean": mean,
            "std": np.sqrt(var),
            "count": np.array([int(self.count)], dtype=np.int64),
        }
        out.update({q: self.parts[q] / self.count for q in QUANTILES})
        return {k: np.asarray(v).tolist() for k, v in out.items()}


# -- arrow helpers --------------------------------------------------------------------------------------------------
def nested_list(values: np.ndarray) -> pa.Array:
    """(N, *shape) array -> N nested (variable-size) lists, the type lerobot's episodes table stores stats in."""
    values = np.ascontiguousarray(values)
    arr: pa.Array = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        count = len(arr) // size
        arr = pa.ListArray.from_arrays(pa.array(np.arange(0, count * size + 1, size, dtype=np.int32)), arr)
    return arr


def fixed_list(values: np.ndarray) -> pa.Array:
    """(rows, D) float32 -> fixed_size_list<float32>[D], the type lerobot's data files use for vector features."""
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), values.shape[1])


# -- video ----------------------------------------------------------------------------------------------------------
def render_frames(frames: int, size: int, camera: int, seed: int) -> np.ndarray:
    """uint8 (T, size, size, 3): a drifting gradient and a moving square, different per camera."""
    rng = np.random.default_rng([seed, 2, camera])
    t = np.arange(frames, dtype=np.float32)[:, None, None]
    y = np.arange(size, dtype=np.float32)[None, :, None]
    x = np.arange(size, dtype=np.float32)[None, None, :]
    phase = float(rng.uniform(0, 2 * np.pi))
    base = 110 + 70 * np.sin(2 * np.pi * (x + y) / size + 0.1 * t + phase)
    cy = (size * (0.5 + 0.3 * np.sin(0.09 * t + phase))).astype(np.int64)
    cx = (size * (0.5 + 0.3 * np.cos(0.07 * t))).astype(np.int64)
    square = (np.abs(y - cy) < size / 8) & (np.abs(x - cx) < size / 8)
    gray = np.where(square, 230.0, base)
    tint = np.array([1.0, 0.85 + 0.05 * camera, 0.7], dtype=np.float32)
    return np.clip(gray[..., None] * tint, 0, 255).astype(np.uint8)


def encode(frames: np.ndarray, path: Path, fps: int, codec: str, gop: int, crf: int) -> None:
    """Encode uint8 RGB frames with PyAV like lerobot (yuv420p, keyframe every `gop` frames, faststart)."""
    import av  # noqa: PLC0415 (PyAV is only needed here)

    names = {"av1": "libsvtav1", "h264": "libx264", "hevc": "libx265"}
    preset = {"libsvtav1": "12", "libx264": "veryfast"}.get(names.get(codec, codec))
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", options={"movflags": "faststart"}) as container:
        stream = container.add_stream(names.get(codec, codec), rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.time_base = Fraction(1, fps)
        stream.codec_context.gop_size = gop
        stream.options = {"crf": str(crf), **({"preset": preset} if preset else {})}
        for i, frame in enumerate(frames):
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            video_frame.pts = i
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode(None))


def link_episode_videos(stage: Path, key: str, episodes: int, chunks_size: int) -> None:
    """Episode e's file of camera `key` (chunk e // chunks_size, file e % chunks_size): a hard link to episode 0's,
    the one real mp4 (a directory entry each: 2 s for 200k)."""
    real = stage / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
    for episode in range(1, episodes):
        chunk, file = divmod(episode, chunks_size)
        path = stage / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
        if file == 0:
            path.parent.mkdir(parents=True)
        os.link(real, path)


def camera_stats_by_length(frames: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-channel stats (3,1,1), in [0,1], of the first L frames (what an episode of length L spans), for every
    distinct L: (the sorted distinct lengths, per stat an (lengths, 3, 1, 1) table)."""
    distinct = np.unique(lengths)
    table: dict[str, list] = {name: [] for name in STAT_NAMES if name != "count"}
    for length in distinct.tolist():
        pixels = frames[:length, ::2, ::2].reshape(-1, 3).astype(np.float64) / 255.0
        stats = {"min": pixels.min(0), "max": pixels.max(0), "mean": pixels.mean(0), "std": pixels.std(0)}
        stats.update({name: np.quantile(pixels, q, axis=0) for name, q in QUANTILES.items()})
        for name, value in stats.items():
            table[name].append(value.reshape(3, 1, 1))
    return distinct, {name: np.stack(values) for name, values in table.items()}


# -- the dataset ----------------------------------------------------------------------------------------------------
def features(args: argparse.Namespace) -> dict[str, dict]:
    dim = args.state_dim
    names = [f"joint_{i}" for i in range(dim)]
    feats: dict[str, dict] = {
        "observation.state": {"dtype": "float32", "shape": [dim], "names": names, "fps": args.fps},
        "action": {"dtype": "float32", "shape": [dim], "names": names, "fps": args.fps},
    }
    for cam in range(args.cameras):
        feats[f"observation.images.cam{cam}"] = {
            "dtype": "video",
            "shape": [args.size, args.size, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": args.size,
                "video.width": args.size,
                "video.codec": args.codec,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": args.fps,
                "video.channels": 3,
                "has_audio": False,
                "video.g": args.gop,
                "video.crf": args.crf,
            },
        }
    for name, dtype in zip(INDEX_COLUMNS, ("float32", "int64", "int64", "int64", "int64")):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None, "fps": args.fps}
    return feats


def generate(args: argparse.Namespace) -> dict:
    out = Path(args.out).resolve()
    if out.exists() and not args.overwrite:
        sys.exit(f"{out}: already exists (pass --overwrite to replace it)")
    stage = out.parent / f".{out.name}.generating-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    started = time.perf_counter()
    try:
        summary = _write(stage, args)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
            os.replace(stage, out)
            shutil.rmtree(old)
        else:
            os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["root"] = str(out)
    return summary


def _write(stage: Path, args: argparse.Namespace) -> dict:
    feats = features(args)
    video_keys = [k for k, f in feats.items() if f["dtype"] == "video"]
    vector_keys = ("observation.state", "action")
    n_eps, fps, dim = args.episodes, args.fps, args.state_dim
    lengths = episode_lengths(n_eps, args.frames_per_episode, args.seed)
    starts = np.zeros(n_eps + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    total_frames = int(starts[-1])
    rng_tasks = np.random.default_rng([args.seed, 3])
    n_tasks = args.tasks
    task_names = [TASKS[i] if i < len(TASKS) else f"task number {i}" for i in range(n_tasks)]
    episode_task = rng_tasks.integers(0, n_tasks, size=n_eps).astype(np.int64)

    # videos: one real mp4 per camera, as long as the longest episode, linked as each episode's file; every episode
    # spans its first `length` frames
    longest = int(lengths.max())
    camera_stats = {}
    for cam, key in enumerate(video_keys):
        frames = render_frames(longest, args.size, cam, args.seed)
        encode(
            frames,
            stage / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0),
            fps,
            args.codec,
            args.gop,
            args.crf,
        )
        link_episode_videos(stage, key, n_eps, args.chunks_size)
        camera_stats[key] = camera_stats_by_length(frames, lengths)

    # the data files' schema, with the `huggingface` metadata lerobot's writer (an HF datasets table) carries
    hf_features = {
        k: {"feature": {"dtype": "float32", "_type": "Value"}, "length": dim, "_type": "List"} for k in vector_keys
    }
    hf_features.update({k: {"dtype": feats[k]["dtype"], "_type": "Value"} for k in INDEX_COLUMNS})
    schema = pa.schema(
        [(k, pa.list_(pa.float32(), dim)) for k in vector_keys]
        + [("timestamp", pa.float32())]
        + [(k, pa.int64()) for k in INDEX_COLUMNS[1:]],
        metadata={"huggingface": json.dumps({"info": {"features": hf_features}})},
    )
    aggregates = {k: Aggregate() for k in feats}
    pending: list[dict[str, np.ndarray | pa.Array]] = []  # episode-table batches not yet written
    pending_rows = 0
    meta_file = 0
    per_data = max(1, args.episodes_per_data_file)
    per_meta = max(1, args.episodes_per_meta_file)
    data_files = 0

    def flush_meta(force: bool) -> None:
        nonlocal pending, pending_rows, meta_file
        while pending_rows >= per_meta or (force and pending_rows):
            table = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            take = min(per_meta, pending_rows)
            part = table.slice(0, take)
            rest = table.slice(take)
            chunk, file = divmod(meta_file, args.chunks_size)
            part = part.set_column(
                part.schema.get_field_index("meta/episodes/chunk_index"),
                "meta/episodes/chunk_index",
                pa.array(np.full(take, chunk, dtype=np.int64)),
            )
            part = part.set_column(
                part.schema.get_field_index("meta/episodes/file_index"),
                "meta/episodes/file_index",
                pa.array(np.full(take, file, dtype=np.int64)),
            )
            path = stage / EPISODES_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            # lerobot's recorder flushes its episode-metadata buffer (10 episodes) as one row group
            pq.write_table(part, path, row_group_size=max(1, args.meta_row_group), compression="snappy")
            meta_file += 1
            pending, pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    for first in range(0, n_eps, per_data):
        eps = np.arange(first, min(first + per_data, n_eps))
        lens = lengths[eps]
        rows = int(lens.sum())
        row0 = int(starts[first])
        chunk, file = divmod(data_files, args.chunks_size)
        rng = np.random.default_rng([args.seed, 4, data_files])
        # smooth-ish joint trajectories: a per-episode offset plus a bounded random walk, as float32
        columns: dict[str, np.ndarray] = {}
        for j, key in enumerate(vector_keys):
            offset = np.repeat(rng.uniform(-1, 1, size=(len(eps), dim)), lens, axis=0)
            noise = rng.standard_normal((rows, dim)) * 0.05
            columns[key] = (offset + np.sin(np.cumsum(noise, axis=0))).astype(np.float32)
        frame_index = np.arange(rows, dtype=np.int64) - np.repeat(starts[eps] - row0, lens)
        episode_col = np.repeat(eps.astype(np.int64), lens)
        task_col = np.repeat(episode_task[eps], lens)
        table = pa.Table.from_arrays(
            [fixed_list(columns[k]) for k in vector_keys]
            + [
                pa.array((frame_index / fps).astype(np.float32)),
                pa.array(frame_index),
                pa.array(episode_col),
                pa.array(np.arange(row0, row0 + rows, dtype=np.int64)),
                pa.array(task_col),
            ],
            schema=schema,
        )
        path = stage / DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(path, schema, compression="snappy", use_dictionary=True) as writer:
            offset = 0
            for length in lens.tolist():  # one row group per episode, as lerobot's recorder writes them
                writer.write_table(table.slice(offset, length))
                offset += length

        # per-episode stats of every feature
        stats: dict[str, dict[str, np.ndarray]] = {k: segment_stats(columns[k], lens) for k in vector_keys}
        stats["timestamp"] = ramp_stats(lens, 0.0, 1.0 / fps)
        stats["frame_index"] = ramp_stats(lens)
        stats["episode_index"] = constant_stats(eps)
        stats["index"] = ramp_stats(lens, starts[eps].astype(np.float64))
        stats["task_index"] = constant_stats(episode_task[eps])
        for key in video_keys:
            distinct, table_by_len = camera_stats[key]
            row = np.searchsorted(distinct, lens)
            stats[key] = {name: values[row] for name, values in table_by_len.items()}
        for key, feat_stats in stats.items():
            aggregates[key].add(feat_stats, lens)

        cols: dict[str, pa.Array] = {
            "episode_index": pa.array(eps.astype(np.int64)),
            "tasks": pa.array([[task_names[t]] for t in episode_task[eps].tolist()], type=pa.list_(pa.string())),
            "length": pa.array(lens.astype(np.int64)),
            "data/chunk_index": pa.array(np.full(len(eps), chunk, dtype=np.int64)),
            "data/file_index": pa.array(np.full(len(eps), file, dtype=np.int64)),
            "dataset_from_index": pa.array(starts[eps]),
            "dataset_to_index": pa.array(starts[eps + 1]),
        }
        for key in video_keys:
            cols[f"videos/{key}/chunk_index"] = pa.array((eps // args.chunks_size).astype(np.int64))
            cols[f"videos/{key}/file_index"] = pa.array((eps % args.chunks_size).astype(np.int64))
            cols[f"videos/{key}/from_timestamp"] = pa.array(np.zeros(len(eps), dtype=np.float64))
            cols[f"videos/{key}/to_timestamp"] = pa.array(lens / fps)
        for key in feats:
            for name in STAT_NAMES:
                if name == "count":
                    cols[f"stats/{key}/count"] = nested_list(lens.astype(np.int64)[:, None])
                else:
                    cols[f"stats/{key}/{name}"] = nested_list(stats[key][name])
        cols["meta/episodes/chunk_index"] = pa.array(np.zeros(len(eps), dtype=np.int64))
        cols["meta/episodes/file_index"] = pa.array(np.zeros(len(eps), dtype=np.int64))
        pending.append(pa.table(cols))
        pending_rows += len(eps)
        flush_meta(force=False)
        data_files += 1
        if args.progress and data_files % 10 == 0:
            print(f"  {first + len(eps)}/{n_eps} episodes", file=sys.stderr, flush=True)
    flush_meta(force=True)

    frame = pd.DataFrame({"task_index": np.arange(n_tasks, dtype=np.int64)}, index=pd.Index(task_names, name="task"))
    frame.to_parquet(stage / "meta/tasks.parquet")
    (stage / "meta/stats.json").write_text(json.dumps({k: a.result() for k, a in aggregates.items()}, indent=4))
    info = {
        "codebase_version": "v3.0",
        "robot_type": "synthetic_bimanual",
        "total_episodes": n_eps,
        "total_frames": total_frames,
        "total_tasks": n_tasks,
        "chunks_size": args.chunks_size,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {"train": f"0:{n_eps}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if video_keys else None,
        "features": feats,
    }
    (stage / "meta/info.json").write_text(json.dumps(info, indent=4))
    return {
        "episodes": n_eps,
        "frames": total_frames,
        "data_files": data_files,
        "episode_files": meta_file,
        "cameras": len(video_keys),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", help="dataset root to create (must not exist unless --overwrite)")
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--frames-per-episode", type=int, default=100, help="mean episode length (+-20%%)")
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--size", type=int, default=64, help="camera height and width")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--state-dim", type=int, default=14)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--episodes-per-data-file", type=int, default=1000)
    parser.add_argument("--episodes-per-meta-file", type=int, default=10000)
    parser.add_argument(
        "--meta-row-group",
        type=int,
        default=10,
        help="episodes per row group of the episodes table (lerobot's recorder: 10)",
    )
    parser.add_argument("--chunks-size", type=int, default=1000, help="files per chunk-XXX folder")
    parser.add_argument("--codec", default="av1", help="av1 (lerobot's default), h264 or hevc")
    parser.add_argument("--gop", type=int, default=2)
    parser.add_argument("--crf", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--progress", action="store_true", help="print progress every 10 data files")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.frames_per_episode < 1:
        parser.error("--episodes and --frames-per-episode must be >= 1")
    summary = generate(args)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
