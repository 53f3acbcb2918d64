"""`robostream verify ROOT`: a v3.0 dataset's self-consistency, checked cheaply (local datasets): what the readers
rely on, so that a dataset that verifies is one they read.

- the metadata loads as the readers load it (info.json's numbers and features, the episode table's columns, each
  camera's span lasting length / fps and no two spans in one camera file overlapping), else that error is the one
  problem reported;
- every data file: every feature info.json declares is a column, readable as its declared dtype and shape (no
  nulls); each episode's `timestamp`s lie inside it;
- every data file: its `episode_index`/`index` columns (nothing else is read) hold each episode it is named by as
  one contiguous run whose `index` is the episode table's [dataset_from_index, dataset_to_index);
- every camera file: the stream's frame rate and frame size are info.json's; the packets (demuxed, not decoded) whose time lies in an episode's [from, to) number exactly
  the episode's length;
- every episode and camera: the first and the last frame decode, at `from_timestamp + timestamp`, within the
  tolerance.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError
from robostream.format.data_rows import check_timestamps, data_features, feature_column
from robostream.format.info import CAMERA_OR_TEXT_DTYPES, FPS_RELATIVE_TOLERANCE, feature_frame_size
from robostream.format.metadata import load_metadata

DEFAULT_TOLERANCE_S = 1e-4


def _check_data(meta, problems: list[str]) -> None:
    by_file: dict[str, list[int]] = defaultdict(list)
    for episode in meta.episodes.episode_index.tolist():
        by_file[meta.data_file(episode)].append(episode)
    features = data_features(meta.info.features)
    numeric = [k for k, f in features.items() if f["dtype"] not in CAMERA_OR_TEXT_DTYPES]
    declared = [k for k, f in meta.info.features.items() if f["dtype"] != "video"]
    for rel, episodes in by_file.items():
        path = Path(meta.local(rel, what="data file"))
        names = pq.read_schema(path).names
        missing = [k for k in declared if k not in names]
        if missing:
            problems.append(f"{path}: lacks column(s) {missing} that meta/info.json declares")
            continue
        table = pq.read_table(path, columns=[k for k in numeric if k in names], use_threads=False)
        try:
            columns = {k: feature_column(table, k, features[k], str(path)) for k in table.column_names}
        except DatasetFormatError as exc:
            problems.append(str(exc))
            continue
        owner, index = columns["episode_index"], columns["index"]
        for episode in episodes:
            row = meta.episodes.row_of(episode)
            lo, hi = int(meta.episodes.from_index[row]), int(meta.episodes.to_index[row])
            rows = np.flatnonzero(owner == episode)
            expected = np.arange(lo, hi)
            contiguous = len(rows) == 0 or rows[-1] - rows[0] + 1 == len(rows)
            if not contiguous or len(rows) != hi - lo or not np.array_equal(index[rows], expected):
                problems.append(
                    f"{path}: episode {episode} has {len(rows)} rows (index "
                    f"{index[rows][:1].tolist()}..{index[rows][-1:].tolist()}), the episode table says "
                    f"[{lo}, {hi})"
                )
            elif "timestamp" in columns:
                try:
                    check_timestamps(str(path), episode, columns["timestamp"][rows], meta.fps)
                except DatasetFormatError as exc:
                    problems.append(str(exc))


def _first_frame_at(container, stream, seconds: float) -> float | None:
    """Time of the decoded frame nearest to `seconds` (seeking to the keyframe before it)."""
    container.seek(max(int(seconds / stream.time_base), 0), stream=stream, backward=True, any_frame=False)
    best = None
    for frame in container.decode(stream):
        t = float(frame.pts * stream.time_base)
        if best is None or abs(t - seconds) < abs(best - seconds):
            best = t
        if t > seconds:
            break
    return best


def _check_video(meta, key: str, tolerance_s: float, problems: list[str]) -> None:
    by_file: dict[str, list[int]] = defaultdict(list)
    for episode in meta.episodes.episode_index.tolist():
        by_file[meta.video_file(episode, key)].append(episode)
    fps = meta.fps
    size = feature_frame_size(meta.info.features[key])
    for rel, episodes in by_file.items():
        path = Path(meta.local(rel, what="video file"))
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.guessed_rate or 0)
            if abs(rate - fps) > FPS_RELATIVE_TOLERANCE * fps:
                problems.append(f"{path}: runs at {rate:g} fps, but meta/info.json says the dataset's fps is {fps}")
                continue
            if size is not None and (stream.codec_context.height, stream.codec_context.width) != size:
                problems.append(
                    f"{path}: frames of {stream.codec_context.height}x{stream.codec_context.width} "
                    f"(height x width), but meta/info.json declares {size[0]}x{size[1]} for {key!r}"
                )
                continue
            time_base = stream.time_base
            if time_base is None:
                problems.append(f"{path}: the video stream declares no time base; re-encode it")
                continue
            times = np.sort(
                np.array([float(p.pts * time_base) for p in container.demux(stream) if p.pts is not None and p.size])
            )
            for episode in episodes:
                row = meta.episodes.row_of(episode)
                span = meta.episodes.video_span(episode, key)
                length = int(meta.episodes.length[row])
                start, end = span.from_timestamp, span.to_timestamp
                count = int(np.searchsorted(times, end - tolerance_s) - np.searchsorted(times, start - tolerance_s))
                if count != length:
                    problems.append(
                        f"{path}: {count} frames in [{start:.6f}, {end:.6f}) s for episode {episode}, "
                        f"which has {length}"
                    )
                    continue
                for target in (start, start + (length - 1) / fps):
                    got = _first_frame_at(container, stream, target)
                    if got is None or abs(got - target) > tolerance_s:
                        problems.append(
                            f"{path}: episode {episode}: no frame within {tolerance_s} s of {target:.6f} s "
                            f"(nearest decoded: {got})"
                        )


def verify(root: str | Path, *, tolerance_s: float = DEFAULT_TOLERANCE_S) -> dict[str, Any]:
    """Check the v3.0 dataset at `root`; returns {"problems": [...], ...} (empty problems: consistent).

    Args:
        root: a local v3.0 dataset folder.
        tolerance_s: how far a decoded frame's time may lie from the requested one (lerobot's default 1e-4).
    """
    try:
        meta = load_metadata(root)
    except DatasetFormatError as exc:  # the readers would refuse the dataset for this: that is the finding
        return {"root": str(root), "problems": [str(exc)]}
    problems: list[str] = []
    _check_data(meta, problems)
    for key in meta.video_keys:
        _check_video(meta, key, tolerance_s, problems)
    return {
        "root": str(root),
        "episodes": len(meta.episodes),
        "frames": int(meta.episodes.length.sum()),
        "cameras": meta.video_keys,
        "problems": problems,
    }
