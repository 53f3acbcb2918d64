"""robostream's loaders as benchmark factories (see probe.py): the streaming and the map-style dataset behind a
torch DataLoader, set up as a training job would set them up.

`build(params)` runs inside the probe process. params: loader ("stream" | "map"), root, repo_id, revision,
episodes, read_options (a JSON object of ReadOptions' fields), delta_timestamps, batch_size, num_workers,
prefetch_factor, seed, pool_size, decode_ahead, video_backend, video_decode_device, video_decoder_cache_size, pin_memory; a
mixture: sources (robostream.Source arguments), epoch_size and batching instead of root/repo_id.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from robostream.bench.probe import BatchProbe, TimedMapDataset
from robostream.datasets.loader import StreamingDataLoader
from robostream.datasets.look_ahead_sampler import LookAheadBatchSampler
from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.mixture import Mixture, Source, SourceReader
from robostream.datasets.ranks import resolve_rank_world
from robostream.datasets.stream_options import StreamOptions
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.storage.options import read_options_from
from robostream.video.decoder import default_backend
from robostream.video.options import DecodeOptions

LOADERS = ("stream", "map")
# Import the decoder library now, when the probe loads this module, not inside the timed first batch (the peer's
# factory module imports lerobot the same way).
default_backend()


def _dataset(params: dict[str, Any]) -> LeRobotDataset | StreamingLeRobotDataset:
    options = read_options_from(params.get("read_options"), where="the probe's params['read_options']")
    common: dict[str, Any] = dict(
        root=params.get("root"), revision=params.get("revision"), episodes=params.get("episodes"), read_options=options
    )
    common.update(
        delta_timestamps=params.get("delta_timestamps"),
        return_uint8=True,
        video_backend=params.get("video_backend"),
        decoding=DecodeOptions(
            device=params["video_decode_device"], decoders_kept=params.get("video_decoder_cache_size")
        ),
    )
    streaming = dict(
        seed=params["seed"],
        streams=StreamOptions(pool_size=params["pool_size"], decode_ahead=params["decode_ahead"]),
    )
    if params.get("sources"):
        if params["loader"] != "stream":
            raise ValueError(f"a mixture runs with the streaming loader only, not {params['loader']!r}")
        for key in ("root", "revision", "episodes"):
            common.pop(key)
        lanes = (
            {"batching": params["batching"], "batch_size": int(params["batch_size"])}
            if params.get("batching") in ("per_stream", "stratified")
            else {}
        )
        mixture = Mixture(
            sources=[Source(**s) for s in params["sources"]], epoch_size=params.get("epoch_size"), **lanes
        )
        return StreamingLeRobotDataset(mixture=mixture, **common, **streaming)
    if params["loader"] == "stream":
        return StreamingLeRobotDataset(params.get("repo_id"), **common, **streaming)
    if params["loader"] == "map":
        return LeRobotDataset(params.get("repo_id"), **common)
    raise ValueError(f"loader={params['loader']!r}: expected one of {LOADERS}")


def _loader_options(params: dict[str, Any]) -> dict[str, Any]:
    workers = int(params.get("num_workers", 0))
    options: dict[str, Any] = {
        "batch_size": int(params["batch_size"]),
        "num_workers": workers,
        "pin_memory": bool(params.get("pin_memory")),
    }
    if workers:
        options["prefetch_factor"] = int(params.get("prefetch_factor") or 2)
        if params["video_decode_device"].startswith("cuda"):
            options["multiprocessing_context"] = "spawn"  # CUDA cannot be used in forked workers
    return options


def _readers(dataset: LeRobotDataset | StreamingLeRobotDataset) -> Sequence[SourceReader | LeRobotDataset]:
    """What holds each source's metadata and decoders: a streaming dataset's source readers (one for a plain
    dataset), or the map-style dataset itself."""
    return dataset.sources if isinstance(dataset, StreamingLeRobotDataset) else [dataset]


class SummedCacheStats:
    """The decoder-cache counters of every source of a dataset, summed (picklable for spawned workers)."""

    def __init__(self, dataset: LeRobotDataset | StreamingLeRobotDataset) -> None:
        # A mixture's sources share one cache: count it once.
        self.caches = list({id(reader.cameras.cache): reader.cameras.cache for reader in _readers(dataset)}.values())

    def __call__(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for cache in self.caches:
            for key, value in cache.stats().items():
                totals[key] = totals.get(key, 0) + value
        return totals


def frames_per_sample(dataset: LeRobotDataset | StreamingLeRobotDataset) -> int:
    """Camera frames in one sample: each camera's window length (1 without a window; a mixture: its first source,
    whose cameras every source shares)."""
    deltas = dataset.delta_timestamps
    return sum(len(deltas.get(key, [0.0])) for key in _readers(dataset)[0].meta.video_keys)


def _split(params: dict[str, Any], samples: int) -> dict[str, float]:
    """One process, no workers: where a sample's time goes (decode vs everything else, i.e. fetch and assembly).

    The streaming dataset runs through StreamingDataLoader in-process (batches assembled whole, as its workers do).
    Remote reads happen inside the decoders' file reads, so the time readers waited for bytes moves from decode
    to fetch.
    """
    dataset = _dataset(params)
    if isinstance(dataset, StreamingLeRobotDataset):
        batch_size = int(params["batch_size"])
        batches = itertools.islice(StreamingDataLoader(dataset, batch_size=batch_size), -(-samples // batch_size))
        produced = (len(batch["index"]) for batch in batches)
    else:
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(params["seed"]))
        produced = (1 for i in order[:samples] if dataset[int(i)] is not None)
    readers = _readers(dataset)
    # A mixture's remote sources share their blocks (and the time waited for them): count each once.
    storages = list(
        {
            id(reader.meta.data_storage.blocks): reader.meta.data_storage
            for reader in readers
            if not reader.meta.data_storage.is_local
        }.values()
    )
    wait_before = sum(storage.stats().wait_s for storage in storages)
    start = time.perf_counter()
    done = sum(produced)
    seconds = time.perf_counter() - start
    wait = sum(storage.stats().wait_s for storage in storages) - wait_before
    decode = sum(reader.cameras.decode_seconds for reader in readers) - wait
    return {
        "samples": done,
        "seconds": seconds,
        "decode_s": decode,
        "fetch_s": seconds - decode,
        "samples_per_s": done / seconds if seconds else 0.0,
    }


def build(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle of a robostream loader (see probe.py)."""
    started = time.perf_counter()
    dataset = _dataset(params)
    construction_s = time.perf_counter() - started
    stats = SummedCacheStats(dataset)
    options = _loader_options(params)
    loader: StreamingDataLoader | DataLoader
    counts: Callable[[], dict[str, int]] | None = None
    loader_info: dict[str, Any] = {}  # what only this kind of loader has
    if isinstance(dataset, StreamingLeRobotDataset):
        # The loader users run, timed through its on_batch hook (per-batch production time, cache counters).
        streaming = loader = StreamingDataLoader(dataset, on_batch=BatchProbe(stats), **options)

        def streaming_counts() -> dict[str, int]:
            buffers = streaming.batch_buffers
            return {**dataset.frame_counts(), **(buffers.stats() if buffers is not None else {})}

        counts = streaming_counts
    else:
        rank, world = resolve_rank_world()
        generator = torch.Generator().manual_seed(int(params["seed"]))
        sampler = (
            DistributedSampler(dataset, num_replicas=world, rank=rank, seed=int(params["seed"]))
            if world > 1
            else torch.utils.data.RandomSampler(dataset, generator=generator)
        )
        batch_size = options.pop("batch_size")
        batches: Sampler[list[int]] = (
            # Batches that name their worker's next batches: a remote dataset fetches their bytes while this one
            # decodes.
            LookAheadBatchSampler(sampler, batch_size=batch_size, look_ahead=max(1, options["num_workers"]))
            if params["map_sampler"] == "look_ahead"
            # What DataLoader(dataset, batch_size, shuffle=True) makes: each batch fetched when its worker gets it.
            else BatchSampler(sampler, batch_size=batch_size, drop_last=False)
        )
        loader = DataLoader(TimedMapDataset(dataset, stats), batch_sampler=batches, **options)
        loader_info["map_sampler"] = params["map_sampler"]
        counts = dataset.reading.counters.totals  # the stages and remote reads its workers published
    if params["video_decode_device"] != "cpu":
        # which decoder serves each camera (a camera the GPU cannot decode falls back to the CPU): found here, in
        # the main process, by the routing the spawned workers follow
        loader_info["camera_decoders"] = dataset.camera_decoders()
    return {
        "loader": loader,
        "frames_per_sample": frames_per_sample(dataset),
        "counts": counts,
        "split": lambda samples: _split(params, samples),
        "info": {
            "loader": params["loader"],
            **loader_info,
            "decoder": _readers(dataset)[0].cameras.backend,
            "video_decode_device": _readers(dataset)[0].cameras.device,
            "uint8": True,
            "torch_version": torch.__version__,
            "pid": os.getpid(),
            "sources": len(_readers(dataset)),
            "construction_s": construction_s,
        },
    }
