"""Benchmark factory for the `lerobot` peer: lerobot's own map-style dataset and DataLoader, as its trainer builds them.

probe.py loads this file BY PATH under lerobot's interpreter (`"factory": "/abs/.../lerobot_peer.py:build"`), so it
imports only the standard library, numpy, torch, lerobot, probe.py and peer.py (from this folder), never robostream.

What lerobot 0.6.1's `lerobot-train` does, and this factory reproduces (lerobot/scripts/lerobot_train.py and
lerobot/datasets/factory.py):
  * `LeRobotDataset(repo_id, root=..., episodes=..., delta_timestamps=..., video_backend=..., tolerance_s=...,
    return_uint8=True)`: training decodes frames as uint8 CHW (the float conversion happens later, in the policy's
    processor), so workers ship uint8 through shared memory, not float32.
  * the order comes from `EpisodeAwareSampler(..., shuffle=True, seed=seed)` (a permutation that is a pure function
    of (seed, epoch)), not from `shuffle=True` with a generator; `drop_n_last_frames` is policy-dependent, 0 here.
  * `DataLoader(batch_size, num_workers, sampler, pin_memory, drop_last=False, prefetch_factor,
    persistent_workers=True, multiprocessing_context="spawn")`; the worker-only options are dropped without workers.
    Spawned workers re-import torch and lerobot (tens of seconds before the first batch on a small machine); the
    optional parameter `multiprocessing_context` overrides it, like lerobot-train's
    `--dataloader_multiprocessing_context=fork`.
  * with several processes (WORLD_SIZE > 1) lerobot does NOT use a DistributedSampler: `accelerator.prepare` wraps
    the batch sampler in accelerate's `BatchSamplerShard`, so every rank draws the same permutation and takes every
    WORLD_SIZE-th batch starting at its RANK. `peer.RankBatches` does the same (accelerate is not a dependency of
    `lerobot[dataset]`); it omits accelerate's `even_batches` padding at the very end of an epoch.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lerobot
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset
from torch.utils.data import DataLoader, Sampler

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path: its sibling peer.py is imported by name
    sys.path.append(str(Path(__file__).resolve().parent))

if TYPE_CHECKING:  # the same file, by the name the type checker knows
    from robostream.bench import peer
else:
    import peer

LEROBOT_MP_CONTEXT = "spawn"  # lerobot-train's default (lerobot/configs/train.py)


def _dataset(params: dict[str, Any]) -> LeRobotDataset:
    """The dataset exactly as lerobot-train constructs it (uint8 frames), from a local folder only."""
    root = Path(params["root"])
    return LeRobotDataset(
        repo_id=f"local/{root.name}",
        root=root,
        episodes=params.get("episodes"),
        delta_timestamps=params.get("delta_timestamps"),
        video_backend=params.get("video_backend"),
        tolerance_s=params.get("tolerance_s") or peer.DEFAULT_TOLERANCE_S,
        return_uint8=True,
    )


def _frames_per_sample(dataset: LeRobotDataset) -> int:
    """Camera frames decoded for one sample: each camera's window length, 1 for a camera without deltas."""
    deltas = dataset.delta_timestamps or {}
    return sum(len(deltas.get(key, [0.0])) for key in dataset.meta.camera_keys)


def _split(dataset: LeRobotDataset, batches: Callable[[], Sampler[list[int]]]) -> Callable[[int], dict[str, float]]:
    """split(n): n samples in the loader's order, in this process, timing the whole item and its video decoding.

    `batches` makes a fresh sampler: EpisodeAwareSampler moves to the next epoch (another permutation) on every
    iteration, and the loader has already iterated its own. Decoding is lerobot's `DatasetReader._query_videos`
    (all cameras of a sample, decoded in parallel threads); everything else in `__getitem__` (parquet row, window
    rows, task lookup) is fetch time.
    """

    def split(n: int) -> dict[str, float]:
        positions = list(itertools.islice(itertools.chain.from_iterable(batches()), n))
        reader = dataset.reader
        query_videos = peer.TimedCall(reader._query_videos)
        reader._query_videos = query_videos  # an instance attribute shadows the method for this pass only
        try:
            start = time.perf_counter()
            for position in positions:
                dataset[position]
            seconds = time.perf_counter() - start
        finally:
            del reader._query_videos
        return peer.split_result(samples=len(positions), seconds=seconds, decode_s=query_videos.seconds)

    return split


def _info(dataset: LeRobotDataset, loader_info: dict[str, Any]) -> dict[str, Any]:
    """What was measured: versions, decoder, frame dtype and the DataLoader settings that differ from robostream's."""
    return {
        "peer": "lerobot",
        "lerobot_version": lerobot.__version__,
        "torch_version": torch.__version__,
        "torchcodec_version": peer.version("torchcodec"),
        "video_backend": dataset.reader._video_backend,
        "uint8": True,
        "frames": "uint8 CHW (return_uint8=True, as lerobot-train builds its dataset)",
        **loader_info,
        "worker_stats": "none: lerobot's VideoDecoderCache keeps no hit/miss counters",
    }


def build(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle for lerobot: its DataLoader over a TimedMapDataset-wrapped LeRobotDataset."""
    dataset = _dataset(params)
    loader, loader_info = peer.map_style_loader(dataset, params, multiprocessing_context=LEROBOT_MP_CONTEXT)
    batch_size, seed = int(params["batch_size"]), int(params["seed"])
    return {
        "loader": loader,
        "frames_per_sample": _frames_per_sample(dataset),
        "counts": None,
        "split": _split(dataset, lambda: peer.episode_batches(dataset, batch_size=batch_size, seed=seed)),
        "info": _info(dataset, loader_info),
    }


def build_streaming(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle for lerobot's StreamingLeRobotDataset from the Hub (HF_ENDPOINT: the bench's Hub emulator),
    as lerobot-train builds it with `--dataset.streaming=true` (lerobot/datasets/factory.py: `max_num_shards` =
    num_workers, uint8 frames; its shuffle buffer of 1000 and seed; DataLoader without sampler, drop_last=False)."""
    probe = peer.load_probe()
    num_workers = int(params["num_workers"])
    dataset = StreamingLeRobotDataset(
        params["repo_id"],
        revision=params.get("revision"),
        episodes=params.get("episodes"),
        delta_timestamps=params.get("delta_timestamps"),
        max_num_shards=max(1, num_workers),
        seed=int(params["seed"]),
        tolerance_s=params.get("tolerance_s") or peer.DEFAULT_TOLERANCE_S,
        return_uint8=True,
    )
    options = peer.loader_options(params, multiprocessing_context=LEROBOT_MP_CONTEXT)
    pin_memory = bool(params.get("pin_memory", False))
    loader = DataLoader(
        probe.TimedIterableDataset(dataset),
        batch_size=int(params["batch_size"]),
        pin_memory=pin_memory,
        drop_last=False,
        **options,
    )
    info = {
        "peer": "lerobot-stream",
        "lerobot_version": lerobot.__version__,
        "torch_version": torch.__version__,
        "torchcodec_version": peer.version("torchcodec"),
        "uint8": True,
        "dataset": f"StreamingLeRobotDataset({params['repo_id']!r}, max_num_shards={max(1, num_workers)}, "
        f"buffer_size={dataset.buffer_size}, seed={params['seed']})",
        **peer.loader_info(options, pin_memory=pin_memory),
    }
    return {
        "loader": loader,
        "frames_per_sample": _frames_per_sample(dataset),
        "counts": None,
        "split": None,
        "info": info,
    }
