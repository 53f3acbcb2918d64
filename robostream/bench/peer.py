"""What the peer factories (lerobot_peer.py, lancedb_peer.py) share: lerobot-train's order for a map-style dataset
(EpisodeAwareSampler in batches, a rank's share of them as accelerate shards batches), its DataLoader worker options,
probe.py imported by name, and the timing of the single-process split.

Each peer puts this folder on sys.path and imports this file as `peer`, under the peer's own interpreter, so it
imports only the standard library, torch, lerobot and probe.py (from this folder), never robostream.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from lerobot.datasets.sampler import EpisodeAwareSampler
from torch.utils.data import BatchSampler, DataLoader, Sampler

try:  # the decoder library before the timed first batch, as robostream's loaders do (the peers import it lazily)
    import torchcodec.decoders  # noqa: F401
except ImportError:
    pass

HERE = Path(__file__).resolve().parent
PERSISTENT_WORKERS = True  # lerobot-train's default (lerobot/configs/train.py)
DEFAULT_TOLERANCE_S = 1e-4  # LeRobotDataset's default (and LanceDBDataset's)


def load_probe() -> ModuleType:
    """probe.py, imported under the name `probe` with its folder on sys.path.

    The dataset is wrapped in probe's TimedMapDataset and pickled into spawned (or forkserver) workers, which
    re-import the class by module name; they inherit sys.path, so `probe` must be importable by that name, not only
    by path.
    """
    if "probe" in sys.modules:
        return sys.modules["probe"]
    if str(HERE) not in sys.path:
        sys.path.append(str(HERE))
    spec = importlib.util.spec_from_file_location("probe", HERE / "probe.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"{HERE / 'probe.py'}: not loadable as a module; the bench folder is incomplete")
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


def world() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun / accelerate launch set both)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def episode_batches(dataset: Any, *, batch_size: int, seed: int) -> Sampler[list[int]]:
    """This rank's batches of dataset positions, in lerobot-train's order (first epoch): EpisodeAwareSampler's
    shuffled order, in batches of `batch_size` (the last one short), every WORLD_SIZE-th batch from RANK on.

    Args:
        dataset: a LeRobotDataset, or a dataset with its episode attributes (`meta.episodes`, `episodes`,
            `absolute_to_relative_idx`: LanceDBDataset).
        batch_size: samples in a batch.
        seed: the sampler's seed.
    """
    order = EpisodeAwareSampler(
        dataset.meta.episodes["dataset_from_index"],
        dataset.meta.episodes["dataset_to_index"],
        episode_indices_to_use=dataset.episodes,
        shuffle=True,
        seed=seed,
        absolute_to_relative_idx=dataset.absolute_to_relative_idx,
    )
    batches = BatchSampler(order, batch_size, drop_last=False)
    rank, world_size = world()
    return batches if world_size == 1 else RankBatches(batches, rank, world_size)


def loader_options(params: Mapping[str, Any], *, multiprocessing_context: str) -> dict[str, Any]:
    """DataLoader worker options: lerobot-train's, left out without workers (as its `_dataloader_worker_kwargs`).

    Args:
        params: the run's parameters: `num_workers`, `prefetch_factor` and optionally `multiprocessing_context`.
        multiprocessing_context: the workers' start method when `params` names none.
    """
    num_workers = int(params["num_workers"])
    if num_workers == 0:
        return {"num_workers": 0}
    return {
        "num_workers": num_workers,
        "prefetch_factor": int(params["prefetch_factor"]),
        "persistent_workers": PERSISTENT_WORKERS,
        "multiprocessing_context": params.get("multiprocessing_context") or multiprocessing_context,
    }


def loader_info(options: Mapping[str, Any], *, pin_memory: bool) -> dict[str, Any]:
    """The DataLoader settings a run's info reports (they may differ from robostream's): pin_memory and the worker
    options but the worker count (the run reports that itself)."""
    return {"pin_memory": pin_memory, **{key: value for key, value in options.items() if key != "num_workers"}}


def map_style_loader(
    dataset: Any, params: Mapping[str, Any], *, multiprocessing_context: str
) -> tuple[DataLoader, dict[str, Any]]:
    """lerobot-train's DataLoader over a map-style dataset, and its settings for the run's info.

    The dataset is wrapped in probe's TimedMapDataset (a dataset with `__getitems__` is timed per batch); the loader
    draws this rank's `episode_batches`, with lerobot-train's worker options.

    Args:
        dataset: a LeRobotDataset or LanceDBDataset (see `episode_batches`).
        params: the run's parameters: `batch_size`, `seed`, `pin_memory` and the worker options (`loader_options`).
        multiprocessing_context: the workers' start method when `params` names none.
    """
    options = loader_options(params, multiprocessing_context=multiprocessing_context)
    pin_memory = bool(params.get("pin_memory", False))
    loader = DataLoader(
        load_probe().TimedMapDataset(dataset, worker_stats=None),
        batch_sampler=episode_batches(dataset, batch_size=int(params["batch_size"]), seed=int(params["seed"])),
        pin_memory=pin_memory,
        **options,
    )
    rank, world_size = world()
    info = {
        "sampler": "EpisodeAwareSampler(shuffle=True, seed)"
        + (f", accelerate-style batch shard rank {rank} of {world_size}" if world_size > 1 else ""),
        "drop_last": False,
        **loader_info(options, pin_memory=pin_memory),
    }
    return loader, info


def version(distribution: str) -> str | None:
    """Installed version of a distribution, None when it is not installed (torchcodec is optional in lerobot)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class TimedCall:
    """`inner`, called as it is, adding the seconds each call takes to `seconds` (an instance attribute set to it
    shadows a dataset's method for one timed pass)."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def split_result(*, samples: int, seconds: float, decode_s: float) -> dict[str, float]:
    """What split(n) reports: the samples read, the seconds the pass took, the decoding in them, the rest (fetch).

    Args:
        samples: samples read in the pass.
        seconds: the whole pass.
        decode_s: the part of it spent decoding video.
    """
    return {
        "samples": samples,
        "seconds": seconds,
        "decode_s": decode_s,
        "fetch_s": seconds - decode_s,
        "samples_per_s": samples / seconds if seconds > 0 else 0.0,
    }
