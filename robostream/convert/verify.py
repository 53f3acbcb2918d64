"""`robostream verify ROOT`: a v3.0 dataset's self-consistency, checked cheaply (local datasets).

- every data file: its `episode_index`/`index` columns (nothing else is read) hold each episode it is named by as
  one contiguous run whose `index` is the episode table's [dataset_from_index, dataset_to_index);
- every camera file: the packets (demuxed, not decoded) whose time lies in an episode's [from, to) number exactly
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

from robostream.format.metadata import load_metadata

DEFAULT_TOLERANCE_S = 1e-4


def _check_data(meta, problems: list[str]) -> None:
    by_file: dict[str, list[int]] = defaultdict(list)
    for episode in meta.episodes.episode_index.tolist():
        by_file[meta.data_file(episode)].append(episode)
    for rel, episodes in by_file.items():
        path = Path(meta.local(rel, what="data file"))
        table = pq.read_table(path, columns=["episode_index", "index"], use_threads=False)
        owner = table.column("episode_index").to_numpy()
        index = table.column("index").to_numpy()
        for episode in episodes:
            row = meta.episodes.row_of(episode)
            lo, hi = int(meta.episodes.from_index[row]), int(meta.episodes.to_index[row])
            rows = np.flatnonzero(owner == episode)
            expected = np.arange(lo, hi)
            contiguous = len(rows) == 0 or rows[-1] - rows[0] + 1 == len(rows)
            if not contiguous or len(rows) != hi - lo or not np.array_equal(index[rows], expected):
                problems.append(f"{path}: episode {episode} has {len(rows)} rows (index "
                                f"{index[rows][:1].tolist()}..{index[rows][-1:].tolist()}), the episode table says "
                                f"[{lo}, {hi})")


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
    for rel, episodes in by_file.items():
        path = Path(meta.local(rel, what="video file"))
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            times = np.sort(np.array([float(p.pts * stream.time_base) for p in container.demux(stream)
                                      if p.pts is not None and p.size]))
            for episode in episodes:
                row = meta.episodes.row_of(episode)
                span = meta.episodes.video_span(episode, key)
                length = int(meta.episodes.length[row])
                start, end = span.from_timestamp, span.to_timestamp
                count = int(np.searchsorted(times, end - tolerance_s) - np.searchsorted(times, start - tolerance_s))
                if count != length:
                    problems.append(f"{path}: {count} frames in [{start:.6f}, {end:.6f}) s for episode {episode}, "
                                    f"which has {length}")
                    continue
                for target in (start, start + (length - 1) / fps):
                    got = _first_frame_at(container, stream, target)
                    if got is None or abs(got - target) > tolerance_s:
                        problems.append(f"{path}: episode {episode}: no frame within {tolerance_s} s of {target:.6f} s "
                                        f"(nearest decoded: {got})")


def verify(root: str | Path, *, tolerance_s: float = DEFAULT_TOLERANCE_S) -> dict[str, Any]:
    """Check the v3.0 dataset at `root`; returns {"problems": [...], ...} (empty problems: consistent).

    Args:
        root: a local v3.0 dataset folder.
        tolerance_s: how far a decoded frame's time may lie from the requested one (lerobot's default 1e-4).
    """
    meta = load_metadata(root)
    problems: list[str] = []
    _check_data(meta, problems)
    for key in meta.video_keys:
        _check_video(meta, key, tolerance_s, problems)
    return {"root": str(root), "episodes": len(meta.episodes), "frames": int(meta.episodes.length.sum()),
            "cameras": meta.video_keys, "problems": problems}
