"""`robostream bench` and `robostream bench-report`: the run matrix from the arguments (bench/arguments.py), the
slow store, progress and the summary table."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

from robostream.bench.choices import LOADERS, MODES, StoreApi
from robostream.bench.cores import pinned_here, split_cores
from robostream.bench.report import REFERENCE, load_results, markdown, render, write_csv, write_json
from robostream.bench.runner import (
    BenchError,
    RunConfig,
    StoreSettings,
    barrier,
    check_config,
    dataset_metadata,
    export_launch,
    finish,
    gatherer,
    resolve_launch,
    run_config,
)
from robostream.datasets.sources_file import parse_source_arguments, source_arguments
from robostream.plan.mixture import DEFAULT_BATCHING
from robostream.storage.options import ReadOptions
from robostream.testing.hub_store import HubServer, hub_environment
from robostream.testing.s3_dialect import S3RangeServer
from robostream.testing.slow_store import RangeHTTPServer

# peers that read each API
PEERS_OVER_STORE: dict[StoreApi, set[str]] = {"hub": {"lerobot-stream"}, "s3": {"lancedb"}, "http": set()}


def configs(args: argparse.Namespace) -> list[RunConfig]:
    """The run matrix: modes x (robostream loaders + peers)."""
    root = args.root or args.root_arg
    sources = _sources(args.sources) if args.sources else None
    if sources is not None:
        if root is not None or args.repo_id is not None:
            raise BenchError("give either a dataset (ROOT, --root, --repo_id) or a mixture (--sources), not both")
        if set(args.loader or ["stream"]) != {"stream"} or args.peer:
            raise BenchError("a mixture (--sources) runs with --loader stream only, without peers")
    elif root is None and args.repo_id is None:
        raise BenchError("robostream bench needs a dataset: ROOT / --root PATH_OR_URL, or --repo_id")
    elif args.epoch_size is not None or args.batching != DEFAULT_BATCHING:
        raise BenchError("--epoch_size and --batching apply to a mixture (--sources)")
    deltas = json.loads(args.delta_timestamps) if args.delta_timestamps else None
    if deltas is not None and args.mode:
        raise BenchError("give either --mode or --delta_timestamps, not both")
    modes = ["custom"] if deltas is not None else (args.mode or list(MODES))
    first = sources[0].get("root") if sources else root
    store = _store_settings(args)
    label = args.label or (
        f"{'slow' if store['api'] == 'http' else store['api']}{args.store_latency_ms or 0:g}ms"
        if store
        else "local"
        if first is not None and "://" not in str(first)
        else "remote"
    )
    common = dict(
        root=root,
        repo_id=args.repo_id,
        revision=args.revision,
        read_options=ReadOptions(
            data_files_root=args.data_files_root,
            storage_options=json.loads(args.storage_options) if args.storage_options else None,
            cache_dir=args.cache_dir,
            cache_limit=args.cache_limit,
            read_buffer=args.read_buffer,
        ),
        label=label,
        delta_timestamps=deltas,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        prefetch_factor=args.prefetch_factor,
        map_sampler=args.map_sampler,
        num_batches=args.num_batches,
        duration_s=args.duration_s,
        warmup_batches=args.warmup_batches,
        seed=args.seed,
        pool_size=args.pool_size,
        decode_ahead=args.decode_ahead,
        video_backend=args.video_backend,
        video_decoder_cache_size=args.video_decoder_cache_size,
        video_decode_device=args.video_decode_device,
        device=args.device,
        split_samples=args.split_samples,
        peer_python=args.peer_python,
        peer_root=args.peer_root,
        sources=sources,
        epoch_size=args.epoch_size,
        batching=args.batching,
        store=store,
    )
    loaders = args.loader or (["stream"] if sources else ["stream", "map"])
    if args.warmup_batches < 1:
        raise BenchError("--warmup_batches must be >= 1: the first batch is start-up latency, never throughput")
    return [RunConfig(loader=loader, mode=mode, **common) for mode in modes for loader in [*loaders, *args.peer]]


def _store_settings(args: argparse.Namespace) -> StoreSettings | None:
    """The slow store's settings when any --store_* option is given (None: read ROOT as it is)."""
    settings = StoreSettings(
        latency_ms=args.store_latency_ms,
        mbps=args.store_mbps,
        max_in_flight=args.store_max_in_flight,
        api=args.store_api,
    )
    given = {name: settings[name] for name in ("latency_ms", "mbps", "max_in_flight")}
    if all(v is None for v in given.values()):
        if args.store_api != "http":
            raise BenchError(
                f"--store_api {args.store_api} reads through the slow store: give --store_latency_ms "
                "(or --store_mbps / --store_max_in_flight)"
            )
        return None
    for name, value in given.items():
        if value is not None and value <= 0:
            raise BenchError(f"--store_{name} {value}: expected a positive number")
    return settings


class Throttle(TypedDict):
    """How the test servers (RangeHTTPServer, S3RangeServer, HubServer) slow their answers down."""

    latency_s: float
    bandwidth: float | None
    max_in_flight: int | None


def video_bytes_per_frame(root: Path) -> float:
    """The mean bytes of one camera frame in a local dataset's mp4 files (0: no video)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    cameras = sum(1 for feature in info["features"].values() if feature.get("dtype") == "video")
    size = sum(path.stat().st_size for path in (root / "videos").rglob("*.mp4")) if cameras else 0
    return size / (int(info["total_frames"]) * cameras) if size else 0.0


@dataclasses.dataclass(frozen=True)
class ServedStore:
    """The slow store a run reads from, and the mean video bytes of one camera frame of the dataset it serves."""

    server: RangeHTTPServer | HubServer
    frame_bytes: float


@contextlib.contextmanager
def slow_store(args: argparse.Namespace) -> Iterator[ServedStore | None]:
    """With --store_* options, the slow store serving the local ROOT through --store_api, and args pointed at it
    (args.root, or args.repo_id for the Hub); else None."""
    settings = _store_settings(args)
    if settings is None:
        yield None
        return
    root = args.root or args.root_arg
    api = settings["api"]
    if (
        root is None
        or "://" in str(root)
        or not Path(root).is_dir()
        or args.sources
        or args.repo_id
        or args.storage_options
    ):
        raise BenchError(
            "--store_* options serve a local dataset folder (ROOT) through the slow store: give a local "
            "ROOT, and no --sources, --repo_id or --storage_options"
        )
    if set(args.peer) - PEERS_OVER_STORE[api]:
        raise BenchError(
            f"--peer {' '.join(args.peer)} with --store_api {api}: the peers that read that store are "
            f"{sorted(PEERS_OVER_STORE[api]) or 'none'}"
        )
    root = Path(root).resolve()
    throttle = Throttle(
        latency_s=(settings["latency_ms"] or 0) / 1000,
        max_in_flight=settings["max_in_flight"],
        bandwidth=settings["mbps"] * 1e6 if settings["mbps"] else None,
    )
    frame_bytes = video_bytes_per_frame(root)
    with contextlib.ExitStack() as stack:
        if api == "hub":  # the dataset as a Hub repo; huggingface_hub here and in every probe pointed at it
            repo_id = f"bench/{root.name}"
            version = json.loads((root / "meta" / "info.json").read_text())["codebase_version"]
            server = stack.enter_context(HubServer({repo_id: root}, tags=(version,), **throttle))
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="robostream-bench-hf-")))
            stack.enter_context(hub_environment(server.endpoint, home))
            args.root, args.root_arg, args.repo_id = None, None, repo_id
        elif api == "s3":  # buckets: the dataset (and a peer's own conversion) linked into an empty folder
            buckets = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="robostream-bench-s3-")))
            served = {"root": root, **({"peer_root": Path(args.peer_root).resolve()} if args.peer_root else {})}
            for folder in served.values():
                (buckets / folder.name).symlink_to(folder, target_is_directory=True)
            server = stack.enter_context(S3RangeServer(buckets, **throttle))
            server.hash_files()
            args.root, args.root_arg = server.s3_url(root.name), None
            args.peer_root = server.s3_url(served["peer_root"].name) if args.peer_root else None
            args.storage_options = json.dumps(server.storage_options())
        else:
            server = stack.enter_context(RangeHTTPServer(root, **throttle))
            server.hash_files()
            args.root, args.root_arg = server.url, None
        yield ServedStore(server, frame_bytes)


def store_cpu_s() -> float:
    """CPU seconds of this process's threads but the calling one so far, exited threads included: the store's
    (its threads serve while the main thread only waits for the probe process, which is not counted here)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime - time.thread_time()


def _sources(text: str) -> list[dict[str, Any]]:
    """--sources: a JSON list of Source arguments inline, or @FILE (JSON, or YAML for .yaml/.yml)."""
    if text.startswith("@"):
        return source_arguments(text[1:])
    return parse_source_arguments(text, where="--sources", syntax="json")


def local_twin_config(config: RunConfig, root: str) -> RunConfig:
    """`config` (a run through the slow store) reading the local dataset folder `root` the store serves."""
    return dataclasses.replace(
        config,
        root=root,
        repo_id=None,
        revision=None,
        read_options=dataclasses.replace(config.read_options, storage_options=None),
        label="local",
        store=None,
    )


def run_bench(args: argparse.Namespace) -> int:
    local_root = args.root or args.root_arg  # before the slow store points args at itself
    with slow_store(args) as store:
        plan = configs(args)
        if args.with_local:
            if store is None:
                raise BenchError("--with_local runs each configuration locally before the slow store: give --store_*")
            plan = [
                run
                for config in plan
                for run in (
                    [local_twin_config(config, str(local_root)), config] if config.loader in LOADERS else [config]
                )
            ]
        return _run_bench(args, plan, store)


def _run_bench(args: argparse.Namespace, plan: list[RunConfig], store: ServedStore | None) -> int:
    from rich.console import Console

    from robostream.bench.reference import decode_reference
    from robostream.video.decoder import default_backend

    console = Console(width=160, stderr=True)
    launch = resolve_launch()
    export_launch(launch)
    gather = gatherer(launch)
    out = Path(args.out)
    default_backend()  # import the decoder once, so no configuration pays for it
    jobs = []
    references: list[dict[str, Any]] = []
    laid_out: list[dict[str, Any]] = []  # the same decoding with the frames laid out as samples hold them
    measure_reference = "decode" in args.reference and launch.rank == 0

    meta = dataset_metadata(plan[0])  # every configuration reads the same source: its metadata once
    for config in plan:
        check_config(config, meta)
    cores = split_cores(
        available=sorted(os.sched_getaffinity(0)), ranks_per_node=launch.local_world_size, store_cores=args.store_cores
    )

    def reference_run(when: str) -> None:
        root = str(meta.root)
        console.print(f"[bold]reference[/] ({when}): raw sequential decode of {root}, then laid out")
        for runs, laid in ((references, False), (laid_out, True)):
            runs.append(
                decode_reference(
                    root,
                    args.video_backend,
                    args.video_decode_device,
                    max_frames=args.reference_frames,
                    laid_out=laid,
                )
            )

    if measure_reference:
        reference_run("before the runs")
    for i, config in enumerate(plan, 1):
        if launch.rank == 0:
            console.print(f"[bold][{i}/{len(plan)}][/] {config.name()} (world size {launch.world_size})")
        barrier(launch)
        served = store is not None and config.store is not None  # not a local twin (--with_local)
        with pinned_here(cores.store if served else None):
            if store is not None:
                store.server.reset_stats()
            started, store_cpu_from = time.monotonic(), store_cpu_s()
            mine, job = run_config(config, meta, launch, gather, probe_cores=cores.probe)
            store_cpu = store_cpu_s() - store_cpu_from
        for result in (mine, job) if job is not None else (mine,):
            result["info"] = {**result["info"], "pinning": cores.info(with_store=served)}
        if served and store is not None:  # this process's store: what its runs asked of it
            mine["metrics"]["store"] = {
                **store.server.summary(time.monotonic() - started),
                "frame_bytes": store.frame_bytes,
            }
            mine["metrics"]["store_cpu_s"] = store_cpu
            if job is not None:
                job["metrics"]["store"], job["metrics"]["store_cpu_s"] = mine["metrics"]["store"], store_cpu
        if launch.world_size > 1:
            write_json(out / f"{config.name(launch.rank)}.json", mine)
        if job is not None:
            write_json(out / f"{config.name()}.json", job)
            jobs.append(job)
    if measure_reference:
        # Shared machines drift: the limit is measured before and after the runs and the mean is the reference.
        reference_run("after the runs")
        rates = [r["frames_per_s"] for r in references]
        laid_rates = [r["frames_per_s"] for r in laid_out]
        write_json(
            out / REFERENCE,
            {
                **references[0],
                "frames_per_s": sum(rates) / len(rates),
                "runs_frames_per_s": rates,
                "laid_out_frames_per_s": sum(laid_rates) / len(laid_rates),
                "runs_laid_out_frames_per_s": laid_rates,
                "laid_out_batch_frames": laid_out[0]["batch_frames"],
                "runs_load_1min": [r["load_1min"] for r in references],
                "cores": len(os.sched_getaffinity(0)),
            },
        )
    if launch.rank == 0:
        results, reference = load_results(out)
        names = {json.dumps(j["config"], sort_keys=True) for j in jobs}
        this_run = [r for r in results if json.dumps(r["config"], sort_keys=True) in names]
        write_csv(out, results)
        console.print(markdown(this_run, reference), markup=False, soft_wrap=True)  # markdown: never wrapped
        console.print(f"results: {out}/ (JSON per run, results.csv); plots: robostream bench-report {out}")
    finish(launch)
    return 0


def run_report(args: argparse.Namespace) -> int:
    print(render(Path(args.folder)), end="")
    print(f"wrote {args.folder}/report.md, throughput.png, latency_cdf.png")
    return 0
