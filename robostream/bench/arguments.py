"""`robostream bench` and `robostream bench-report` command lines (options take both spellings: `--batch_size` and
`--batch-size`).

Light on purpose: every `robostream` command builds the whole parser (robostream/cli.py), so this imports neither
torch nor the loaders; bench/command.py runs what the arguments ask for.
"""

from __future__ import annotations

import argparse

from robostream.bench.choices import LOADERS, MODES, PEERS, STORE_APIS, STORE_CORES
from robostream.datasets.stream_options import DEFAULT_POOL_SIZE
from robostream.plan.mixture import DEFAULT_BATCHING
from robostream.plan.order import DEFAULT_SEED
from robostream.storage.options import DEFAULT_READ_BUFFER
from robostream.video.options import DEFAULT_DECODE_DEVICE


def _option(parser: argparse.ArgumentParser, name: str, **kwargs) -> None:
    spellings = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    parser.add_argument(*spellings, dest=name, **kwargs)


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root_arg", nargs="?", metavar="ROOT", help="dataset folder or URL (same as --root)")
    _option(parser, "root", default=None, help="dataset folder or URL (hf://, s3://, http(s)://)")
    _option(parser, "repo_id", default=None, help="Hub dataset id (instead of --root)")
    _option(parser, "revision", default=None)
    _option(parser, "data_files_root", default=None, help="read data and video files from here (e.g. a bucket)")
    _option(parser, "storage_options", default=None, help="fsspec options of a remote source, as JSON")
    _option(parser, "cache_dir", default=None, help="node-local disk cache of remote files (with --cache_limit)")
    _option(parser, "cache_limit", default=None, help="disk cache size, e.g. 20gb")
    _option(
        parser,
        "read_buffer",
        default=None,
        help=f"fetched remote blocks kept per process, e.g. 128mb (default: {DEFAULT_READ_BUFFER >> 20} MiB, grown by "
        "a streaming pass to its live pieces' working set)",
    )
    _option(parser, "label", default=None, help="a label for result files and tables (default: local/remote)")
    _option(
        parser,
        "sources",
        default=None,
        help="a mixture instead of ROOT: a JSON list of robostream.Source arguments (root, episodes, "
        "proportion/repeat/choose, feature_map, ...), or @FILE holding one; streaming loader only",
    )
    _option(parser, "epoch_size", type=int, default=None, help="samples per epoch of a mixture weighted by proportion")
    _option(
        parser,
        "batching",
        choices=["random", "per_stream", "stratified"],
        default=DEFAULT_BATCHING,
        help="a mixture's batches: sources mixed in each (random), one source per global batch (per_stream) or "
        "each source's share in every batch (stratified)",
    )
    _option(
        parser,
        "mode",
        nargs="+",
        choices=MODES,
        default=None,
        help="single: current frame of every camera; sarm: 8 frames 1 s apart (default: both)",
    )
    _option(parser, "delta_timestamps", default=None, help="custom windows as JSON (replaces --mode)")
    _option(
        parser,
        "loader",
        nargs="+",
        choices=LOADERS,
        default=None,
        help="robostream loaders to run (default: stream and map; a mixture: stream)",
    )
    _option(parser, "peer", nargs="*", choices=PEERS, default=[], help="the same runs with another package")
    _option(parser, "peer_python", default=None, help="interpreter with the peer package installed")
    _option(
        parser,
        "peer_root",
        default=None,
        help="the peer's own conversion of the dataset, for a peer that reads its own layout (lancedb)",
    )
    _option(parser, "batch_size", type=int, default=32)
    _option(parser, "num_workers", type=int, default=2)
    _option(parser, "prefetch_factor", type=int, default=2)
    _option(
        parser,
        "map_sampler",
        choices=["look_ahead", "plain"],
        default="look_ahead",
        help="map-style batches: LookAheadBatchSampler (their worker's next batches fetched ahead), or plain: "
        "torch's BatchSampler over a RandomSampler, as DataLoader(dataset, batch_size, shuffle=True) makes them",
    )
    _option(parser, "num_batches", type=int, default=40, help="timed batches (after the warm-up)")
    _option(parser, "duration_s", type=float, default=None, help="stop the timed part after this many seconds")
    _option(parser, "warmup_batches", type=int, default=2)
    _option(parser, "seed", type=int, default=DEFAULT_SEED)
    _option(
        parser,
        "pool_size",
        type=int,
        default=DEFAULT_POOL_SIZE,
        help="live pieces per canonical stream (streaming)",
    )
    _option(
        parser,
        "decode_ahead",
        type=int,
        default=None,
        help="samples of a piece whose frames are decoded in one call (streaming: memory vs seeks; default by the "
        "frame size: 16 up to 3 cameras of 256x256, else 4; camera files of one episode each: small frames up to 1 MiB "
        "ahead)",
    )
    _option(parser, "video_backend", choices=["torchcodec", "pyav"], default=None)
    _option(parser, "video_decoder_cache_size", type=int, default=None)
    _option(parser, "video_decode_device", choices=["cpu", "cuda"], default=DEFAULT_DECODE_DEVICE)
    _option(parser, "device", default="cpu", help="where the dummy consumer moves each batch (cpu, cuda)")
    _option(
        parser,
        "split_samples",
        type=int,
        default=256,
        help="samples of the single-process fetch/decode probe (0: skip it)",
    )
    _option(
        parser,
        "reference",
        nargs="*",
        choices=["decode"],
        default=[],
        help="also measure raw sequential decode throughput of the same files on all cores",
    )
    _option(parser, "reference_frames", type=int, default=12_000)
    _option(
        parser,
        "store_latency_ms",
        type=float,
        default=None,
        help="serve the local ROOT through the slow store on 127.0.0.1 (robostream/testing/slow_store.py) and read "
        "it from there: this first-byte latency on every request",
    )
    _option(parser, "store_mbps", type=float, default=None, help="the slow store's bandwidth per connection, MB/s")
    _option(
        parser,
        "store_max_in_flight",
        type=int,
        default=None,
        help="requests the slow store serves at once (the others queue, as at a throttled store)",
    )
    _option(
        parser,
        "store_api",
        choices=STORE_APIS,
        default="http",
        help="how the slow store is read: plain HTTP ranges, the Hub's API (the loopback Hub emulator, "
        "hf://; with --peer lerobot-stream), or S3's (s3://)",
    )
    _option(
        parser,
        "store_cores",
        choices=STORE_CORES,
        default="auto",
        help="the slow store's cores: auto: a core of its own where there are 4 or more (the loader the others); own: "
        "wherever the loader keeps one (a 2-core machine: one each, so the store's CPU is not the loader's); shared: "
        "never pinned",
    )
    _option(
        parser,
        "with_local",
        action="store_true",
        help="with --store_*: run each robostream configuration on the local ROOT first, then through the store, "
        "and report the remote/local ratios",
    )
    _option(parser, "out", default="out/bench", help="folder for JSON/CSV results")


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="a `robostream bench --out` folder")
