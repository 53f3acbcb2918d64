"""A read-throughput run: pull shuffled batches through a torch DataLoader and time them.

This is the early benchmark (samples/s, delivered camera frames/s, first-batch latency); the full metric set of
`robostream bench` (latency percentiles, RSS, peers, plots) builds on it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from robostream.bench.modes import mode_delta_timestamps
from robostream.datasets.map_style import LeRobotDataset
from robostream.format.metadata import load_metadata


@dataclass(frozen=True)
class ThroughputResult:
    mode: str
    loader: str
    batch_size: int
    num_workers: int
    batches: int
    samples: int
    frames_delivered: int
    first_batch_latency_s: float
    wallclock_s: float
    samples_per_s: float
    frames_per_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def run_throughput(root: str | Path, mode: str = "single", batch_size: int = 32, num_workers: int = 2,
                   num_batches: int = 50, seed: int = 0, video_backend: str | None = None) -> ThroughputResult:
    """Time `num_batches` shuffled batches (the first batch is timed separately as start-up latency)."""
    meta = load_metadata(root)
    deltas = mode_delta_timestamps(mode, meta.video_keys,
                                   "observation.state" if "observation.state" in meta.info.features else None)
    start = time.perf_counter()
    dataset = LeRobotDataset(root=root, delta_timestamps=deltas, return_uint8=True, video_backend=video_backend)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                        generator=torch.Generator().manual_seed(seed), persistent_workers=False)
    window = len(deltas[meta.video_keys[0]]) if deltas and meta.video_keys else 1
    iterator = iter(loader)
    batches = samples = 0
    first_batch_s = 0.0
    for batch in iterator:
        if batches == 0:
            first_batch_s = time.perf_counter() - start
            timed_from = time.perf_counter()
        else:
            samples += len(batch["index"])
        batches += 1
        if batches > num_batches:
            break
    del iterator
    elapsed = time.perf_counter() - timed_from if batches > 1 else 0.0
    frames = samples * window * len(meta.video_keys)
    return ThroughputResult(
        mode=mode, loader="map", batch_size=batch_size, num_workers=num_workers, batches=batches - 1,
        samples=samples, frames_delivered=frames, first_batch_latency_s=first_batch_s, wallclock_s=elapsed,
        samples_per_s=samples / elapsed if elapsed else 0.0, frames_per_s=frames / elapsed if elapsed else 0.0,
    )
