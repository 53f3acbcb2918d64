"""The physical limit a loader is compared against: raw sequential decode throughput of the dataset's own mp4 files,
with the same decoder, on all cores, with nothing else (no tables, no shuffling, no sample assembly, no transport).

The files' frames are cut into segments that processes decode front to back (one seek per segment); the figure is
decoded frames per second of wall clock over all processes.

Laid out (`laid_out=True`), the same decoding also does what every loader of lerobot's samples must add to it:
each frame laid out as a contiguous (C, H, W) tensor (decoders output packed (H, W, C) pixels; lerobot's samples
hold planes) straight into its slot of a batch tensor of BATCH frames, by robostream's layout path (one
de-interleave; robostream's loaders lay frames out, then copy them into the batch). Its rate bounds any such loader
of uint8 frames however little else it does (float32 samples add their conversion); the raw one bounds decoding
alone. Both run torch on one thread per process, as DataLoader workers do.
"""

from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import torch

from robostream.datasets.cameras import open_dataset_video
from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.video.decoder import Plane, default_backend
from robostream.video.layout import copy_picks

SEGMENT_FRAMES = 512
DECODE_BATCH = 64
BATCH = 32  # frames per batch tensor the laid-out reference copies into (a loader's batch of single frames)


def plan_segments(
    frame_counts: dict[str, int], max_frames: int, segment: int = SEGMENT_FRAMES
) -> list[tuple[str, int, int]]:
    """(file, first frame, stop frame) segments covering up to `max_frames` frames, spread over all files:
    the same share of every file, so every camera and codec setting is represented."""
    total = sum(frame_counts.values())
    share = min(1.0, max_frames / total) if total else 0.0
    segments: list[tuple[str, int, int]] = []
    for path, count in sorted(frame_counts.items()):
        take = max(1, int(count * share)) if count else 0
        segments.extend((path, first, min(take, first + segment)) for first in range(0, take, segment))
    return segments


@functools.cache
def _metadata(root: str) -> DatasetMetadata:
    return load_metadata(root)


def _decode_segment(
    root: str,
    backend: str | None,
    device: str,
    planes: dict[str, Plane],
    laid_out: bool,
    segment: tuple[str, int, int],
) -> int:
    relative, first, stop = segment
    decoder = open_dataset_video(_metadata(root), relative, backend, device, plane=planes[relative])
    batch: torch.Tensor | None = None
    for start in range(first, stop, DECODE_BATCH):
        frames, _ = decoder.get_frames_by_index(range(start, min(stop, start + DECODE_BATCH)))
        if laid_out:
            if batch is None:  # one batch tensor, reused: kept warm, as a loader's reused batch buffers are
                batch = torch.empty((BATCH, *frames.shape[1:]), dtype=frames.dtype, device=frames.device)
            lay_out(frames, batch)
    return stop - first


def lay_out(frames: torch.Tensor, batch: torch.Tensor) -> None:
    """Decoded (N, C, H, W) frames (views of packed pixels) laid out as contiguous (C, H, W) straight into the slots
    of `batch`, a batch's worth at a time (the fewest copies a loader can make): the last run's frames are left in
    its first slots."""
    for at in range(0, len(frames), len(batch)):
        picks = np.arange(at, min(len(frames), at + len(batch)))
        copy_picks(list(batch[: len(picks)]), frames, picks)


def _one_thread() -> None:
    """A decode process's torch on one thread, as in DataLoader workers (the copies do not spread over the cores
    the other processes decode on)."""
    torch.set_num_threads(1)


def _planes(meta: DatasetMetadata) -> dict[str, Plane]:
    """Every video file of the dataset and the plane it is decoded as (a depth camera's: its gray12 codes)."""
    return {
        meta.video_file(int(e), key): "gray12" if key in meta.depth_codings else "rgb"
        for e in meta.episodes.episode_index
        for key in meta.video_keys
    }


def _frame_counts(meta: DatasetMetadata, backend: str, device: str, planes: dict[str, Plane]) -> dict[str, int]:
    return {f: open_dataset_video(meta, f, backend, device, plane=planes[f]).num_frames for f in sorted(planes)}


def decode_reference(
    root: str,
    backend: str | None = None,
    device: str = "cpu",
    processes: int | None = None,
    max_frames: int = 12_000,
    *,
    laid_out: bool = False,
) -> dict[str, Any]:
    """Raw decode throughput of up to `max_frames` frames of the dataset's videos on `processes` (all cores); with
    `laid_out`, of decoding and laying the frames out as samples hold them, in batches (module doc)."""
    backend = backend or default_backend()
    load = os.getloadavg()[0]  # before this measurement's own processes: what else the machine was running
    meta = _metadata(root)  # forked decode processes inherit it (metadata read once)
    if not meta.video_keys:
        raise ValueError(f"{root}: the dataset has no video features, there is nothing to decode")
    processes = processes or os.cpu_count() or 1
    planes = _planes(meta)
    segments = plan_segments(_frame_counts(meta, backend, device, planes), max_frames)
    work = functools.partial(_decode_segment, root, backend, device, planes, laid_out)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=processes, initializer=_one_thread) as pool:
        frames = sum(pool.map(work, segments))
    seconds = time.perf_counter() - start
    return {
        "reference": "decode_laid_out" if laid_out else "decode",
        **({"batch_frames": BATCH} if laid_out else {}),
        "decoder": backend,
        "video_decode_device": device,
        "processes": processes,
        "frames": frames,
        "seconds": seconds,
        "frames_per_s": frames / seconds,
        "load_1min": load,
    }
