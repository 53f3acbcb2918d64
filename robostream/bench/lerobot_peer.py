"""Benchmark factory for the `lerobot` peer: lerobot's own map-style dataset and DataLoader, as its trainer builds them.

probe.py loads this file BY PATH under lerobot's interpreter (`"factory": "/abs/.../lerobot_peer.py:build"`), so it
imports only the standard library, numpy, torch, lerobot and probe.py (from this folder), never robostream.

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
    WORLD_SIZE-th batch starting at its RANK. `RankBatches` does the same (accelerate is not a dependency of
    `lerobot[dataset]`); it omits accelerate's `even_batches` padding at the very end of an epoch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import lerobot
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.sampler import EpisodeAwareSampler
from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset
from torch.utils.data import BatchSampler, DataLoader, Sampler

try:  # import the decoder library before the timed first batch, as robostream's loaders do (lerobot imports it lazily)
    import torchcodec.decoders  # noqa: F401
except ImportError:
    pass

HERE = Path(__file__).resolve().parent
# lerobot-train's defaults (lerobot/configs/train.py) for what the benchmark parameters do not set.
LEROBOT_MP_CONTEXT = "spawn"
LEROBOT_PERSISTENT_WORKERS = True
DEFAULT_TOLERANCE_S = 1e-4


def _probe() -> ModuleType:
    """probe.py, imported under the name `probe` with its folder on sys.path.

    The dataset is wrapped in probe's TimedMapDataset and pickled into spawned workers, which re-import the class
    by module name; spawned children inherit sys.path, so `probe` must be importable by that name, not only by path.
    """
    if "probe" in sys.modules:
        return sys.modules["probe"]
    if str(HERE) not in sys.path:
        sys.path.append(str(HERE))
    spec = importlib.util.spec_from_file_location("probe", HERE / "probe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["probe"] = module
    spec.loader.exec_module(module)
    return module


class RankBatches(Sampler[list[int]]):
    """Every `world_size`-th batch from `rank` on: the batches accelerate's BatchSamplerShard gives one rank."""

    def __init__(self, batches: BatchSampler, rank: int, world_size: int) -> None:
        self.batches, self.rank, self.world_size = batches, rank, world_size

    def __iter__(self) -> Iterator[list[int]]:
        for position, batch in enumerate(self.batches):
            if position % self.world_size == self.rank:
                yield batch

    def __len__(self) -> int:
        return math.ceil(len(self.batches) / self.world_size)


def _dataset(params: dict[str, Any]) -> LeRobotDataset:
    """The dataset exactly as lerobot-train constructs it (uint8 frames), from a local folder only."""
    root = Path(params["root"])
    return LeRobotDataset(
        repo_id=f"local/{root.name}",
        root=root,
        episodes=params.get("episodes"),
        delta_timestamps=params.get("delta_timestamps"),
        video_backend=params.get("video_backend"),
        tolerance_s=params.get("tolerance_s") or DEFAULT_TOLERANCE_S,
        return_uint8=True,
    )


def _world() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun / accelerate launch set both)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _batches(dataset: LeRobotDataset, batch_size: int, seed: int) -> Sampler[list[int]]:
    """This rank's batches of dataset positions, in lerobot-train's order (first epoch)."""
    order = EpisodeAwareSampler(
        dataset.meta.episodes["dataset_from_index"],
        dataset.meta.episodes["dataset_to_index"],
        episode_indices_to_use=dataset.episodes,
        shuffle=True,
        seed=seed,
        absolute_to_relative_idx=dataset.absolute_to_relative_idx,
    )
    batches = BatchSampler(order, batch_size, drop_last=False)
    rank, world_size = _world()
    return batches if world_size == 1 else RankBatches(batches, rank, world_size)


def _loader_options(params: dict[str, Any]) -> dict[str, Any]:
    """DataLoader worker options: lerobot-train's, left out without workers (as its `_dataloader_worker_kwargs`)."""
    num_workers = int(params["num_workers"])
    if num_workers == 0:
        return {"num_workers": 0}
    return {
        "num_workers": num_workers,
        "prefetch_factor": int(params["prefetch_factor"]),
        "persistent_workers": LEROBOT_PERSISTENT_WORKERS,
        "multiprocessing_context": params.get("multiprocessing_context") or LEROBOT_MP_CONTEXT,
    }


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
        query_videos = reader._query_videos
        decode_s = 0.0

        def timed_query_videos(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
            nonlocal decode_s
            start = time.perf_counter()
            try:
                return query_videos(*args, **kwargs)
            finally:
                decode_s += time.perf_counter() - start

        reader._query_videos = timed_query_videos  # an instance attribute shadows the method for this pass only
        try:
            start = time.perf_counter()
            for position in positions:
                dataset[position]
            seconds = time.perf_counter() - start
        finally:
            del reader._query_videos
        return {
            "samples": len(positions),
            "seconds": seconds,
            "decode_s": decode_s,
            "fetch_s": seconds - decode_s,
            "samples_per_s": len(positions) / seconds if seconds > 0 else 0.0,
        }

    return split


def _version(distribution: str) -> str | None:
    """Installed version of a distribution, None when it is not installed (torchcodec is optional in lerobot)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _info(dataset: LeRobotDataset, options: dict[str, Any], pin_memory: bool) -> dict[str, Any]:
    """What was measured: versions, decoder, frame dtype and the DataLoader settings that differ from robostream's."""
    rank, world_size = _world()
    return {
        "peer": "lerobot",
        "lerobot_version": lerobot.__version__,
        "torch_version": torch.__version__,
        "torchcodec_version": _version("torchcodec"),
        "video_backend": dataset.reader._video_backend,
        "uint8": True,
        "frames": "uint8 CHW (return_uint8=True, as lerobot-train builds its dataset)",
        "sampler": "EpisodeAwareSampler(shuffle=True, seed)"
        + (f", accelerate-style batch shard rank {rank} of {world_size}" if world_size > 1 else ""),
        "drop_last": False,
        "pin_memory": pin_memory,
        **{key: value for key, value in options.items() if key != "num_workers"},
        "worker_stats": "none: lerobot's VideoDecoderCache keeps no hit/miss counters",
    }


def build(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle for lerobot: its DataLoader over a TimedMapDataset-wrapped LeRobotDataset."""
    probe = _probe()
    dataset = _dataset(params)
    batch_size, seed = int(params["batch_size"]), int(params["seed"])
    options = _loader_options(params)
    pin_memory = bool(params.get("pin_memory", False))
    loader = DataLoader(
        probe.TimedMapDataset(dataset, worker_stats=None),
        batch_sampler=_batches(dataset, batch_size, seed),
        pin_memory=pin_memory,
        **options,
    )
    return {
        "loader": loader,
        "frames_per_sample": _frames_per_sample(dataset),
        "counts": None,
        "split": _split(dataset, lambda: _batches(dataset, batch_size, seed)),
        "info": _info(dataset, options, pin_memory),
    }


def build_streaming(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle for lerobot's StreamingLeRobotDataset from the Hub (HF_ENDPOINT: the bench's Hub emulator),
    as lerobot-train builds it with `--dataset.streaming=true` (lerobot/datasets/factory.py: `max_num_shards` =
    num_workers, uint8 frames; its shuffle buffer of 1000 and seed; DataLoader without sampler, drop_last=False)."""
    probe = _probe()
    num_workers = int(params["num_workers"])
    dataset = StreamingLeRobotDataset(
        params["repo_id"],
        revision=params.get("revision"),
        episodes=params.get("episodes"),
        delta_timestamps=params.get("delta_timestamps"),
        max_num_shards=max(1, num_workers),
        seed=int(params["seed"]),
        tolerance_s=params.get("tolerance_s") or DEFAULT_TOLERANCE_S,
        return_uint8=True,
    )
    options = _loader_options(params)
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
        "torchcodec_version": _version("torchcodec"),
        "uint8": True,
        "dataset": f"StreamingLeRobotDataset({params['repo_id']!r}, max_num_shards={max(1, num_workers)}, "
        f"buffer_size={dataset.buffer_size}, seed={params['seed']})",
        "pin_memory": pin_memory,
        **{key: value for key, value in options.items() if key != "num_workers"},
    }
    return {
        "loader": loader,
        "frames_per_sample": _frames_per_sample(dataset),
        "counts": None,
        "split": None,
        "info": info,
    }
