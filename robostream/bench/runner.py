"""Run benchmark configurations: each in a fresh probe process (ours or the lerobot peer's interpreter), figures from
its trace, and under torchrun / accelerate launch / SLURM the ranks' figures gathered into a job-wide result.

Ranks run every configuration together (a barrier before each), each probe process reads its rank's share (the
streaming dataset splits by RANK/WORLD_SIZE, the map-style loaders use a DistributedSampler), and rank 0 aggregates.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from robostream.bench.choices import PEER_FACTORIES, PEERS, MapSampler, StoreApi
from robostream.bench.metrics import aggregate, summarize, uniform_randomness
from robostream.bench.modes import mode_delta_timestamps
from robostream.datasets.origin import open_dataset
from robostream.datasets.stream_options import DEFAULT_POOL_SIZE
from robostream.datasets.streaming import DEFAULT_TOLERANCE_S
from robostream.errors import RobostreamError
from robostream.format.depth import DEFAULT_DEPTH_UNIT
from robostream.format.metadata import DatasetMetadata
from robostream.plan.mixture import DEFAULT_BATCHING
from robostream.plan.order import DEFAULT_SEED
from robostream.plan.windows import delta_offsets
from robostream.storage.options import ReadOptions
from robostream.video.options import DEFAULT_DECODE_DEVICE

HERE = Path(__file__).resolve().parent


class BenchError(RobostreamError):
    """A benchmark run failed or was configured wrongly."""


class StoreSettings(TypedDict):
    """The slow store a run's root is served through (the --store_* options), as the run's config records it."""

    latency_ms: float | None
    mbps: float | None
    max_in_flight: int | None
    api: StoreApi


@dataclass(frozen=True)
class RunConfig:
    """One benchmark configuration: which loader reads which data how, and how long it is measured."""

    loader: str  # "stream" | "map" (robostream) or a peer (PEERS)
    mode: str  # "single" | "sarm" | "custom"
    root: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    read_options: ReadOptions = field(default_factory=ReadOptions)  # how the data's bytes are read
    label: str = "local"  # names the run in result files and tables
    delta_timestamps: dict[str, list[float]] | None = None  # mode "custom"
    batch_size: int = 32
    num_workers: int = 2
    prefetch_factor: int = 2
    map_sampler: MapSampler = "look_ahead"  # map-style batches: LookAheadBatchSampler, or torch's plain ones
    num_batches: int = 40
    duration_s: float | None = None
    warmup_batches: int = 2
    seed: int = DEFAULT_SEED
    pool_size: int = DEFAULT_POOL_SIZE
    decode_ahead: int | None = None  # None: by the frame size (StreamOptions)
    video_backend: str | None = None
    video_decoder_cache_size: int | None = None
    video_decode_device: str = DEFAULT_DECODE_DEVICE
    device: str = "cpu"
    split_samples: int = 256  # single-process fetch/decode probe (0: skip)
    peer_python: str | None = None
    peer_root: str | None = None  # what a peer reads when it needs its own conversion (lancedb), folder or URL
    sources: list[dict[str, Any]] | None = None  # a mixture (robostream.Source arguments) instead of root/repo_id
    epoch_size: int | None = None  # of a mixture weighted by proportion
    batching: str = DEFAULT_BATCHING  # of a mixture: "random", "per_stream" or "stratified"
    store: StoreSettings | None = None  # the slow store the root is served through

    def name(self, rank: int | None = None) -> str:
        """File stem, e.g. `local_stream_single_b32_w2_cpu` (`_rank3` for one rank's part of a multi-rank job; a
        mixture of 3 sources: `local_mix3_stream_...`)."""
        mix = f"_mix{len(self.sources)}" if self.sources else ""
        mix += {"per_stream": "_perstream", "stratified": "_stratified"}.get(self.batching, "")
        stem = (
            f"{self.label}{mix}_{self.loader}_{self.mode}_b{self.batch_size}_w{self.num_workers}_"
            f"{self.video_decode_device.split(':')[0]}"
        )
        return stem if rank is None else f"{stem}_rank{rank}"


@dataclass(frozen=True)
class Launch:
    """This process's place in a multi-process job (one process per GPU or per node share)."""

    rank: int = 0
    world_size: int = 1
    local_world_size: int = 1

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def resolve_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """From torchrun / accelerate launch (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE) or SLURM tasks (SLURM_PROCID, ...)."""
    env = os.environ if environ is None else environ
    if "RANK" in env:
        world = int(env.get("WORLD_SIZE", 1))
        return Launch(int(env["RANK"]), world, int(env.get("LOCAL_WORLD_SIZE", world)))
    if int(env.get("SLURM_NTASKS", 1)) > 1:
        world = int(env["SLURM_NTASKS"])
        per_node = int(env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or world // int(env.get("SLURM_NNODES", 1)))
        return Launch(int(env["SLURM_PROCID"]), world, per_node)
    return Launch()


def export_launch(launch: Launch) -> None:
    """Make a SLURM-resolved layout visible as RANK/WORLD_SIZE to the probe processes and torch.distributed."""
    if launch.world_size > 1 and "RANK" not in os.environ:
        if "MASTER_ADDR" not in os.environ:
            raise BenchError(
                "a multi-task SLURM job without torchrun needs MASTER_ADDR and MASTER_PORT (the first "
                "node's host name and a free port); or launch with torchrun (benchmarks/slurm/)"
            )
        os.environ.update(
            RANK=str(launch.rank), WORLD_SIZE=str(launch.world_size), LOCAL_WORLD_SIZE=str(launch.local_world_size)
        )


def dataset_metadata(config: RunConfig) -> DatasetMetadata:
    """The benchmarked dataset's metadata (root, or repo_id pinned to its revision; a mixture: its first source's,
    whose keys every source shares)."""
    return source_metadata(config)[0]


def source_metadata(config: RunConfig) -> list[DatasetMetadata]:
    """The metadata of the benchmarked dataset, or of every source of a mixture."""
    wheres = config.sources or [{"repo_id": config.repo_id, "root": config.root, "revision": config.revision}]
    return [
        open_dataset(
            where.get("repo_id"),
            where.get("root"),
            where.get("revision"),
            config.read_options,
            config.video_backend,
            "robostream bench",
            depth_output_unit=DEFAULT_DEPTH_UNIT,
        )
        for where in wheres
    ]


def resolve_deltas(config: RunConfig, meta: DatasetMetadata) -> dict[str, list[float]] | None:
    """The config's delta_timestamps: from the mode, or given (mode "custom")."""
    if config.mode == "custom":
        if not config.delta_timestamps:
            raise BenchError("mode 'custom' needs --delta_timestamps '{\"key\": [seconds, ...]}'")
        return config.delta_timestamps
    state = "observation.state" if "observation.state" in meta.info.features else None
    return mode_delta_timestamps(config.mode, meta.video_keys, state)


def check_config(config: RunConfig, meta: DatasetMetadata) -> None:
    """Raise what `config`'s run would fail on before measuring anything (its peer's interpreter, its windows), so
    that a bad argument fails at once, not after the runs before it."""
    peer_python(config)
    deltas = resolve_deltas(config, meta)
    if deltas and not config.sources:  # a mixture's windows name its common keys: its sources check them
        delta_offsets(deltas, meta.fps, DEFAULT_TOLERANCE_S, list(meta.info.features))


def peer_python(config: RunConfig) -> str | None:
    """The interpreter a peer's probe runs under (None: robostream's loaders, this interpreter)."""
    if config.loader not in PEERS:
        return None
    if not config.peer_python:
        raise BenchError(
            f"--peer {config.loader} needs --peer_python: an interpreter with {config.loader} "
            "installed (it needs its own torch, so it lives in its own environment)"
        )
    return config.peer_python


def probe_command(config: RunConfig, spec_path: str, trace_path: str) -> list[str]:
    """The probe process: robostream's loaders under this interpreter, the peer under its own."""
    python = peer_python(config)
    if python is not None:
        return [python, str(HERE / "probe.py"), spec_path, trace_path]
    return [sys.executable, "-m", "robostream.bench.probe", spec_path, trace_path]


def local_device(device: str, environ: Mapping[str, str] | None = None) -> str:
    """`cuda` means this process's GPU: cuda:LOCAL_RANK under torchrun / accelerate launch (one GPU per process)."""
    env = os.environ if environ is None else environ
    return f"cuda:{env.get('LOCAL_RANK', 0)}" if device == "cuda" else device


def probe_spec(
    config: RunConfig, deltas: dict[str, list[float]] | None, cpu_affinity: list[int] | None = None
) -> dict[str, Any]:
    factory = f"{HERE / PEER_FACTORIES[config.loader]}" if config.loader in PEERS else "robostream.bench.loaders:build"
    params = {
        "loader": config.loader,
        "root": config.root,
        "peer_root": config.peer_root,
        "repo_id": config.repo_id,
        "revision": config.revision,
        "episodes": None,
        "delta_timestamps": deltas,
        "read_options": asdict(config.read_options),  # robostream's loaders and the LanceDB peer (its fields)
        "batch_size": config.batch_size,
        "num_workers": config.num_workers,
        "prefetch_factor": config.prefetch_factor,
        "map_sampler": config.map_sampler,
        "seed": config.seed,
        "pool_size": config.pool_size,
        "decode_ahead": config.decode_ahead,
        "video_backend": config.video_backend,
        "video_decoder_cache_size": config.video_decoder_cache_size,
        "video_decode_device": local_device(config.video_decode_device),
        "sources": config.sources,
        "epoch_size": config.epoch_size,
        "batching": config.batching,
        # pinned host memory only helps a CPU-decoded batch on its way to a GPU
        "pin_memory": config.device.startswith("cuda") and config.video_decode_device == "cpu",
    }
    return {
        "factory": factory,
        "params": params,
        "num_batches": config.num_batches,
        "warmup_batches": config.warmup_batches,
        "duration_s": config.duration_s,
        "device": local_device(config.device),
        "split_samples": config.split_samples,
        "cpu_affinity": cpu_affinity,
    }


def run_echoing_stderr(command: list[str], keep: int = 8192) -> tuple[int, str]:
    """Run `command`, passing its stderr (progress bar, errors) through live, and return the exit code and the
    stderr's last `keep` characters (to name the failure in our own error).

    The command runs in a process group of its own, killed once the command has ended: its children (DataLoader
    workers) never outlive it. A command that dies by a signal while its children still hold its stderr open is
    reported when it exits, not when they do (a probe that crashed used to hang the benchmark on its orphans).
    """
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None  # stderr=PIPE
    tail = b""
    try:
        while True:
            if select.select([process.stderr], [], [], 1.0)[0]:
                chunk = os.read(process.stderr.fileno(), 65536)
                if not chunk:
                    break
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
                tail = (tail + chunk)[-keep:]
            elif process.poll() is not None:  # exited, and nothing left to read: what holds the pipe is orphans
                break
        return process.wait(), tail.decode(errors="replace")
    finally:
        process.stderr.close()
        _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the process group `process` leads (itself, if interrupted; its orphaned children)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group has no process left
        return
    process.wait()


def run_probe(
    config: RunConfig, deltas: dict[str, list[float]] | None, cpu_affinity: list[int] | None = None
) -> dict[str, Any]:
    """Run one configuration in a fresh process (on `cpu_affinity`'s cores, if given) and return its trace."""
    with tempfile.TemporaryDirectory(prefix="robostream-bench-") as tmp:
        spec_path, trace_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "trace.json")
        with open(spec_path, "w") as fh:
            json.dump(probe_spec(config, deltas, cpu_affinity), fh)
        command = probe_command(config, spec_path, trace_path)
        returncode, tail = run_echoing_stderr(command)
        if returncode != 0 or not os.path.exists(trace_path):
            last = tail.strip().splitlines()[-1] if tail.strip() else "no error output"
            raise BenchError(
                f"benchmark run {config.name()} failed (exit code {returncode} from "
                f"{' '.join(command[:3])} ...): {last}"
            )
        with open(trace_path) as fh:
            return json.load(fh)


def gatherer(launch: Launch) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Collects every rank's result (torch.distributed over gloo: CPU only, works beside any GPU backend)."""
    if launch.world_size == 1:
        return lambda mine: [mine]
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=launch.rank, world_size=launch.world_size)

    def gather(mine: dict[str, Any]) -> list[dict[str, Any]]:
        everyone: list[Any] = [None] * launch.world_size
        dist.all_gather_object(everyone, mine)
        return everyone

    return gather


def barrier(launch: Launch) -> None:
    """Start a configuration on all ranks together."""
    if launch.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def finish(launch: Launch) -> None:
    """Leave together and close the process group: a rank exiting with gloo still running aborts at exit
    ("terminate called without an active exception"), failing the job after its results were written."""
    if launch.world_size > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def run_config(
    config: RunConfig,
    meta: DatasetMetadata,
    launch: Launch,
    gather: Callable[[dict[str, Any]], list[dict[str, Any]]],
    probe_cores: list[int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """This rank's result and, on rank 0, the job-wide one (None elsewhere); `meta` is the benchmarked dataset's,
    `probe_cores` the cores the probe runs on (None: any)."""
    try:
        deltas = resolve_deltas(config, meta)
        trace = run_probe(config, deltas, probe_cores)
        summary = summarize(trace, config.warmup_batches)
        if config.sources:  # the episodes every source selects
            lengths = [
                int(n)
                for where, source in zip(config.sources, source_metadata(config))
                for n in (
                    source.episodes.lengths_of(where["episodes"])
                    if where.get("episodes") is not None
                    else source.episodes.length
                )
            ]
        else:
            lengths = [int(n) for n in meta.episodes.length]
        summary["uniform_randomness_frac"] = uniform_randomness(lengths, config.batch_size, seed=config.seed)
    except (RobostreamError, ValueError) as exc:
        # Every rank still joins the gather, so the others learn of the failure instead of waiting for this rank.
        gather({"rank": launch.rank, "error": str(exc)})
        raise
    config_dict = asdict(replace(config, delta_timestamps=deltas))
    mine = {
        "config": config_dict,
        "rank": launch.rank,
        "metrics": summary,
        "info": trace.get("info", {}),
        "host": host_info(),
    }
    everyone = gather(mine)
    failed = [r for r in everyone if "error" in r]
    if failed:
        raise BenchError(f"benchmark run {config.name()} failed on rank {failed[0]['rank']}: {failed[0]['error']}")
    if launch.rank != 0:
        return mine, None
    job = aggregate([r["metrics"] for r in everyone], launch.nodes)
    job["uniform_randomness_frac"] = summary["uniform_randomness_frac"]
    return mine, {
        "config": config_dict,
        "world_size": launch.world_size,
        "nodes": launch.nodes,
        "metrics": job,
        "per_rank": [
            {
                "rank": r["rank"],
                "host": r["host"]["hostname"],
                **{k: v for k, v in r["metrics"].items() if k != "latency_cdf_ms"},
            }
            for r in everyone
        ],
        "info": trace.get("info", {}),
        "host": host_info(),
    }
