"""Benchmark factory for the `lancedb` peer: lerobot-lancedb's `LanceDBDataset` over its own Lance conversion of the
dataset, in the DataLoader its README recommends for training.

probe.py loads this file BY PATH under the peer's interpreter (.venv-lancedb, scripts/setup_lancedb.sh), so it imports
only the standard library, numpy, torch, lerobot, lerobot_lancedb, probe.py and peer.py (from this folder), never
robostream.

The peer reads its own layout, not the LeRobot folder: `params["peer_root"]` (bench's `--peer_root`) is the output of
`lerobot-lance-convert --root ROOT --out PEER_ROOT` (scripts/convert_lancedb.sh), a local folder or an `s3://` URL of
it. Its three Lance tables: frames (one row per frame), videos (each mp4 verbatim in a blob column, with a keyframe
byte index) and meta (the meta/ files, materialized once into a local cache for a remote root).

What lerobot-lancedb 0.3.1 documents for training (its README and `lerobot_lancedb/reader.py`), reproduced here:
  * `LanceDBDataset(root=..., delta_timestamps=..., tolerance_s=..., return_uint8=True, storage_options=...)`:
    items are LeRobotDataset's (same keys and tensors); with `return_uint8=True` the frames are uint8 CHW straight
    from torchcodec (without it, float32 in [0, 1]), as lerobot-train asks of LeRobotDataset.
  * the dataset implements `__getitems__`: the DataLoader hands it a whole batch of indices, and it reads the batch's
    frame rows (delta windows included, deduplicated) in one take from the frames table and the batch's video byte
    ranges (keyframe-aligned, merged) in one `fetch_blob_ranges`, then decodes each file's frames with torchcodec
    in a 16-thread pool. probe's TimedMapDataset times it that way (each sample: the batch's time / its size).
  * "pair with EpisodeAwareSampler": lerobot's `EpisodeAwareSampler(shuffle=True, seed)`, the order lerobot-train
    draws (the lerobot peer's too, so both read the same samples in the same order); batches of `batch_size`,
    `drop_last=False`; with WORLD_SIZE > 1 each rank takes every WORLD_SIZE-th batch, as the lerobot peer does.
  * `DataLoader(..., num_workers, prefetch_factor, persistent_workers=True,
    multiprocessing_context=lance_mp_context())`: forkserver (fork is unsafe with Lance's async runtime; spawn where
    forkserver is missing). The optional parameter `multiprocessing_context` overrides it.
  * an object-store root gets `storage_options` in the Rust object_store crate's names (lance's), translated here
    from the fsspec/s3fs options the bench passes (`object_store_options`); the reader sets LANCE_IO_THREADS=256
    for a remote root unless the environment sets it. Its meta/ is materialized into a folder of this run's own
    (the reader's cache is keyed by the URL alone, which a later run over another dataset could find stale).
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lerobot_lancedb.reader as lance_reader
import torch
from lerobot_lancedb import LanceDBDataset, lance_mp_context
from torch.utils.data import Sampler

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path: its sibling peer.py is imported by name
    sys.path.append(str(Path(__file__).resolve().parent))

if TYPE_CHECKING:  # the same file, by the name the type checker knows
    from robostream.bench import peer
else:
    import peer

# object_store client options that are not `aws_*` keys, passed through as given
OBJECT_STORE_KEYS = {
    "allow_http",
    "allow_invalid_certificates",
    "timeout",
    "connect_timeout",
    "pool_idle_timeout",
    "client_max_retries",
    "client_retry_timeout",
    "proxy_url",
}


def object_store_options(storage_options: Mapping[str, Any] | None, uri: str) -> dict[str, str] | None:
    """lance's `storage_options` (the Rust object_store crate's keys, string values) for an `s3://` URI, from the
    fsspec/s3fs options the bench passes for its S3 endpoint: `endpoint_url` (top level or in `client_kwargs`),
    `key`/`secret`, `region_name`. An http:// endpoint needs `allow_http`, and an endpoint on an IP address
    path-style requests (`aws_virtual_hosted_style_request=false`). Keys already in object_store's form (`aws_*`,
    `allow_http`, ...) pass through. None for a local root or without options."""
    if not storage_options or "://" not in uri:
        return None
    fsspec = dict(storage_options)
    client = dict(fsspec.pop("client_kwargs", None) or {})
    endpoint = fsspec.pop("endpoint_url", None) or client.get("endpoint_url")
    region = fsspec.pop("region_name", None) or client.get("region_name")
    key, secret, token = fsspec.pop("key", None), fsspec.pop("secret", None), fsspec.pop("token", None)
    options = {
        name: str(value).lower() if isinstance(value, bool) else str(value)
        for name, value in fsspec.items()
        if name.startswith("aws_") or name in OBJECT_STORE_KEYS
    }  # fsspec-only options are dropped
    if endpoint:
        options.setdefault("aws_endpoint", endpoint)
        options.setdefault("aws_virtual_hosted_style_request", "false")
        if endpoint.startswith("http://"):
            options.setdefault("allow_http", "true")
    if key is not None:
        options.setdefault("aws_access_key_id", str(key))
    if secret is not None:
        options.setdefault("aws_secret_access_key", str(secret))
    if token is not None:
        options.setdefault("aws_session_token", str(token))
    if endpoint or key is not None:
        options.setdefault("aws_region", str(region or "us-east-1"))  # object_store signs for a region
    if str(storage_options.get("anon", "")).lower() in ("true", "1"):  # fsspec's anonymous access
        options.setdefault("aws_skip_signature", "true")
    return options or None


def _dataset(params: dict[str, Any]) -> LanceDBDataset:
    uri = params.get("peer_root")
    if not uri:
        raise ValueError(
            "the lancedb peer reads its own conversion: give --peer_root (the folder or s3:// URL "
            "`lerobot-lance-convert --root ROOT --out PEER_ROOT` wrote; scripts/convert_lancedb.sh)"
        )
    uri = str(uri)
    if "://" in uri:
        # A remote root's meta/ is materialized from its meta table into HF_LEROBOT_HOME/remote/<uri>, once and for
        # good: a cache keyed by the URL alone (s3://bucket/key, no endpoint) would serve a stale meta/ to a later
        # run over another dataset of the same name. Each run gets its own, so it also pays that read, as a fresh
        # machine does. Workers unpickle the dataset with this folder as its root; it goes when this process ends.
        cache = tempfile.mkdtemp(prefix="robostream-bench-lancedb-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        lance_reader.HF_LEROBOT_HOME = Path(cache)
    return LanceDBDataset(
        root=uri if "://" in uri else Path(uri),
        episodes=params.get("episodes"),
        delta_timestamps=params.get("delta_timestamps"),
        tolerance_s=params.get("tolerance_s") or peer.DEFAULT_TOLERANCE_S,
        return_uint8=True,
        storage_options=object_store_options(params["read_options"]["storage_options"], uri),
    )


def _frames_per_sample(dataset: LanceDBDataset) -> int:
    deltas = dataset.delta_indices or {}
    return sum(len(deltas.get(key, [0])) for key in dataset.meta.camera_keys)


def _split(
    dataset: LanceDBDataset, batches: Callable[[], Sampler[list[int]]], size: int
) -> Callable[[int], dict[str, float]]:
    """split(n): n samples in the loader's order, in this process, read as the loader reads them (`__getitems__`
    on each batch of indices), timing the whole batch and its decoding.

    decode_s is `_decode_videos` (the batch's torchcodec decoding in the reader's thread pool) less the byte fetch
    inside it (`_ensure_decoders`: the frame windows' ranges the prefetch missed); everything else (frame rows,
    byte index, container headers, decoder creation, the prefetched windows) is fetch time. The video prefetch runs
    in a background thread beside the frames-table read, so this split is of wall time, not of work.
    """

    def split(n: int) -> dict[str, float]:
        positions = list(itertools.islice(itertools.chain.from_iterable(batches()), n))
        decode_videos, ensure_decoders = (
            peer.TimedCall(dataset._decode_videos),
            peer.TimedCall(dataset._ensure_decoders),
        )
        dataset._decode_videos, dataset._ensure_decoders = decode_videos, ensure_decoders
        try:
            start = time.perf_counter()
            for first in range(0, len(positions), size):
                dataset.__getitems__(positions[first : first + size])
            seconds = time.perf_counter() - start
        finally:
            del dataset._decode_videos, dataset._ensure_decoders  # back to the methods
        decode_s = decode_videos.seconds - ensure_decoders.seconds
        return {**peer.split_result(samples=len(positions), seconds=seconds, decode_s=decode_s), "batch_size": size}

    return split


def _info(dataset: LanceDBDataset, loader_info: dict[str, Any], store_options: dict[str, str] | None) -> dict[str, Any]:
    remote = "://" in dataset._db_uri
    return {
        "peer": "lancedb",
        "lerobot_lancedb_version": peer.version("lerobot-lancedb"),
        "lancedb_version": peer.version("lancedb"),
        "lerobot_version": peer.version("lerobot"),
        "torch_version": torch.__version__,
        "torchcodec_version": peer.version("torchcodec"),
        "pyarrow_version": peer.version("pyarrow"),
        "uri": dataset._db_uri,
        "meta": f"materialized from the meta table into a per-run folder ({dataset.root})"
        if remote
        else "read from peer_root/meta",
        "storage_options": sorted(store_options) if store_options else None,  # names only: values may be secrets
        "lance_io_threads": os.environ.get("LANCE_IO_THREADS")
        or ("256 (the reader's default for a remote root)" if remote else "lance's default"),
        "dataset": "LanceDBDataset(root=peer_root, delta_timestamps, return_uint8=True) over lerobot-lance-convert's "
        "tables (frames, videos as blobs, meta)",
        "reads": "batched: __getitems__ per batch (one frames-table take, one fetch_blob_ranges), torchcodec decode "
        "in a 16-thread pool per worker",
        "video_decoder_cache": f"{dataset._decoder_cache.capacity} decoders per worker, 2 GiB byte budget",
        "uint8": True,
        "frames": "uint8 CHW from torchcodec (return_uint8=True; float32 in [0, 1] without it)",
        **loader_info,
        "worker_stats": "none: LanceDBDataset's decoder LRU keeps no hit/miss counters",
    }


def build(params: dict[str, Any]) -> dict[str, Any]:
    """The probe bundle for lerobot-lancedb: a DataLoader over a TimedMapDataset-wrapped LanceDBDataset whose
    batches are read with its batched `__getitems__`."""
    dataset = _dataset(params)
    # forkserver: fork is unsafe with Lance's async runtime (spawn where forkserver is missing)
    loader, loader_info = peer.map_style_loader(dataset, params, multiprocessing_context=lance_mp_context())
    batch_size, seed = int(params["batch_size"]), int(params["seed"])
    return {
        "loader": loader,
        "frames_per_sample": _frames_per_sample(dataset),
        "counts": None,
        "split": _split(dataset, lambda: peer.episode_batches(dataset, batch_size=batch_size, seed=seed), batch_size),
        "info": _info(dataset, loader_info, dataset._storage_options),
    }
