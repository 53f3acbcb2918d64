"""A read-throughput run: pull batches through a torch DataLoader and time them.

This is the early benchmark (samples/s, delivered camera frames/s, first-batch latency, frames decoded per frame
delivered, batch diversity); the full metric set of `robostream bench` (latency percentiles, RSS, peers, plots)
builds on it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from robostream.bench.modes import mode_delta_timestamps
from robostream.datasets.loader import StreamingDataLoader
from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.format.metadata import load_metadata

LOADERS = ("stream", "map")


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
    decoded_per_delivered: float | None  # streaming only: decoder output frames / frames in samples
    live_piece_mib: float | None  # streaming only: peak decoded working set of one live piece
    batch_diversity: float  # distinct episodes per batch / batch size
    uniform_batch_diversity: float  # the same for uniformly random batches of this dataset

    def as_dict(self) -> dict:
        return asdict(self)


def uniform_batch_diversity(episode_of_sample: np.ndarray, batch_size: int, batches: int = 200,
                            seed: int = 0) -> float:
    """Mean distinct episodes per batch / batch size for batches drawn uniformly without replacement."""
    rng = np.random.default_rng(seed)
    picks = [len(np.unique(rng.choice(episode_of_sample, size=batch_size, replace=False))) for _ in range(batches)]
    return float(np.mean(picks) / batch_size)


def run_throughput(root: str | Path, mode: str = "single", loader: str = "stream", batch_size: int = 32,
                   num_workers: int = 2, num_batches: int = 50, seed: int = 0, video_backend: str | None = None,
                   pool_size: int = 8) -> ThroughputResult:
    """Time `num_batches` batches (the first batch is timed separately, as start-up latency)."""
    if loader not in LOADERS:
        raise ValueError(f"loader={loader!r}: expected one of {LOADERS}")
    meta = load_metadata(root)
    deltas = mode_delta_timestamps(mode, meta.video_keys,
                                   "observation.state" if "observation.state" in meta.info.features else None)
    start = time.perf_counter()
    if loader == "stream":
        dataset = StreamingLeRobotDataset(root=root, delta_timestamps=deltas, return_uint8=True, seed=seed,
                                          video_backend=video_backend, pool_size=pool_size)
        batches_iter = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
    else:
        dataset = LeRobotDataset(root=root, delta_timestamps=deltas, return_uint8=True, video_backend=video_backend)
        batches_iter = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                                  generator=torch.Generator().manual_seed(seed))
    window = len(deltas[meta.video_keys[0]]) if deltas and meta.video_keys else 1
    iterator = iter(batches_iter)
    batches = samples = 0
    first_batch_s, timed_from = 0.0, time.perf_counter()
    diversity = []
    for batch in iterator:
        if batches == 0:
            first_batch_s = time.perf_counter() - start
            timed_from = time.perf_counter()
        else:
            samples += len(batch["index"])
        diversity.append(len(torch.unique(batch["episode_index"])) / len(batch["index"]))
        batches += 1
        if batches > num_batches:
            break
    elapsed = time.perf_counter() - timed_from if batches > 1 else 0.0
    del iterator
    frames = samples * window * len(meta.video_keys)
    decoded_ratio = live_mib = None
    if loader == "stream":
        counts = dataset.frame_counts()
        decoded_ratio = counts["frames_decoded"] / max(1, counts["frames_delivered"])
        frame_bytes = np.mean([np.prod(meta.info.features[k]["shape"]) for k in meta.video_keys]) if meta.video_keys \
            else 0
        live_mib = counts["peak_piece_frames"] * frame_bytes / 2 ** 20
    episodes = np.repeat(meta.episodes.episode_index, meta.episodes.length)
    return ThroughputResult(
        mode=mode, loader=loader, batch_size=batch_size, num_workers=num_workers, batches=batches - 1,
        samples=samples, frames_delivered=frames, first_batch_latency_s=first_batch_s, wallclock_s=elapsed,
        samples_per_s=samples / elapsed if elapsed else 0.0, frames_per_s=frames / elapsed if elapsed else 0.0,
        decoded_per_delivered=decoded_ratio, live_piece_mib=live_mib,
        batch_diversity=float(np.mean(diversity)) if diversity else 0.0,
        uniform_batch_diversity=uniform_batch_diversity(episodes, min(batch_size, len(episodes)), seed=seed),
    )
