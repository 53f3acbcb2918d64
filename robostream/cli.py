"""The `robostream` command: synth, inspect, bench, bench-report, convert, transcode, verify, train."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from robostream.errors import RobostreamError


def _synth(args: argparse.Namespace) -> int:
    from robostream.synth import SynthConfig, generate

    config = SynthConfig(
        episodes=args.episodes,
        cameras=args.cameras,
        height=args.height,
        width=args.width,
        fps=args.fps,
        episode_length=args.episode_length,
        codec=args.codec,
        gop=args.gop,
        crf=args.crf,
        data_file_mb=args.data_file_mb,
        video_file_mb=args.video_file_mb,
        seed=args.seed,
        codebase_version=args.codebase_version,
        content=args.content,
        language=args.language,
        depth=args.depth,
        depth_block=args.depth_block,
    )
    start = time.perf_counter()
    root = generate(args.out, config, overwrite=args.overwrite, jobs=args.jobs)
    print(f"wrote {root} in {time.perf_counter() - start:.1f}s")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from robostream.summary import describe, render

    if sys.stderr.isatty():  # a live spinner on a terminal (large datasets take seconds); logs get nothing extra
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        # Live draws at once when entered with a renderable: even a fast inspect shows what it was doing.
        with Live(
            Spinner("dots", text="inspect: reading the metadata, probing every video file"),
            console=Console(stderr=True),
            transient=True,
        ):
            summary = describe(args.root)
    else:
        summary = describe(args.root)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


def _convert(args: argparse.Namespace) -> int:
    from robostream.convert import convert
    from robostream.convert.finalize import is_v30

    engine = _engine_options(args)
    log = lambda line: print(line, file=sys.stderr)
    root, repo_id = _convert_source(args, log)
    summary: dict[str, Any]  # printed as JSON
    if repo_id is not None and is_v30(root) and args.out is None:
        summary = {"output": str(root), "note": "already v3.0 (an earlier run converted it): pushing only"}
    else:
        summary = convert(
            root,
            out=args.out,
            work_dir=args.work_dir,
            workers=args.workers,
            executor=args.executor,
            data_file_size_in_mb=args.data_file_size_in_mb,
            video_file_size_in_mb=args.video_file_size_in_mb,
            engine=engine,
            lease_s=args.lease_s,
            max_attempts=args.max_attempts,
            dry_run=args.dry_run,
            log=log,
        )
    if repo_id is not None and not args.no_push and not args.dry_run and "submitted" not in summary:
        from robostream.convert.hub import push_v30

        summary["hub"] = push_v30(Path(summary["output"]), repo_id, branch=args.branch)
    print(json.dumps(summary))
    return 0


def _engine_options(args: argparse.Namespace):
    """The datatrove executors' options (`add_engine_arguments`) of a convert or transcode command."""
    from robostream.convert import EngineOptions

    return EngineOptions(
        tasks=args.tasks,
        partition=args.partition,
        time=args.time,
        cpus_per_task=args.cpus_per_task,
        mem_per_cpu_gb=args.mem_per_cpu_gb,
        logging_dir=args.logging_dir,
        venv_path=args.venv_path,
    )


def _transcode(args: argparse.Namespace) -> int:
    from robostream.convert.transcode import transcode

    summary = transcode(
        args.src,
        out=args.out,
        codec=args.codec,
        gop=args.gop,
        crf=args.crf,
        preset=args.preset,
        cameras=args.cameras,
        work_dir=args.work_dir,
        workers=args.workers,
        executor=args.executor,
        engine=_engine_options(args),
        lease_s=args.lease_s,
        max_attempts=args.max_attempts,
        dry_run=args.dry_run,
        log=lambda line: print(line, file=sys.stderr),
    )
    if args.push is not None and not args.dry_run and "submitted" not in summary:
        from robostream.convert.hub import push_v30

        summary["hub"] = push_v30(Path(summary["output"]), args.push, branch=args.branch)
    print(json.dumps(summary))
    return 0


def _convert_source(args: argparse.Namespace, log) -> tuple[Path, str | None]:
    """(local v2.1 folder, Hub repo id or None): SRC is a folder, or a repo id whose v2.1 revision is downloaded
    to --root (default $HF_LEROBOT_HOME/REPO_ID, as lerobot) unless it is already there."""
    src = Path(args.src)
    if src.exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", args.src):
        return src, args.repo_id
    repo_id = args.src
    if args.root is not None:
        root = Path(args.root)
    else:
        from huggingface_hub import constants

        root = Path(os.environ.get("HF_LEROBOT_HOME") or Path(constants.HF_HOME) / "lerobot") / repo_id
    if not (root / "meta" / "info.json").is_file():
        from robostream.convert.hub import download_v21

        log(f"downloading {repo_id}@{args.revision} to {root}")
        download_v21(repo_id, local_dir=root, revision=args.revision)
    return root, args.repo_id or repo_id


def _bench(args: argparse.Namespace) -> int:
    from robostream.bench.command import run_bench  # torch and the loaders: only for this command

    return run_bench(args)


def _bench_report(args: argparse.Namespace) -> int:
    from robostream.bench.command import run_report

    return run_report(args)


def _verify(args: argparse.Namespace) -> int:
    from robostream.convert.verify import verify

    report = verify(args.root, tolerance_s=args.tolerance_s)
    print(json.dumps(report, indent=2))
    return 1 if report["problems"] else 0


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src",
        help="the v2.1 dataset folder (converted in place unless --out is given), or a Hub "
        "dataset REPO_ID (its v2.1 revision is downloaded, converted and pushed)",
    )
    parser.add_argument("--out", default=None, help="write the v3.0 dataset here instead (must not exist)")
    parser.add_argument("--data-file-size-in-mb", type=float, default=100.0)
    parser.add_argument("--video-file-size-in-mb", type=float, default=200.0)
    hub = parser.add_argument_group("Hub (SRC is a repo id, or --repo-id names where to push a local folder)")
    hub.add_argument("--repo-id", default=None, help="push the result to this Hub dataset")
    hub.add_argument(
        "--root", default=None, help="where the v2.1 revision is downloaded (default $HF_LEROBOT_HOME/REPO_ID)"
    )
    hub.add_argument("--revision", default="v2.1", help="the v2.1 revision to download (tag, branch or commit)")
    hub.add_argument("--branch", default="main", help="the branch the v3.0 files are pushed to (tag v3.0 last)")
    hub.add_argument("--no-push", action="store_true", help="convert only: no Hub mutation at all")
    add_engine_arguments(parser)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a convert or transcode runs: workers, executor, work dir, leases, and datatrove's options."""
    parser.add_argument(
        "--work-dir",
        default=None,
        help="plan, leases and the dataset being built (default: "
        "beside the output; must be on its filesystem). Rerun the same command to resume",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes (local) or datatrove tasks")
    parser.add_argument("--executor", choices=["local", "datatrove-local", "slurm", "ray"], default="local")
    parser.add_argument(
        "--lease-s",
        type=float,
        default=60.0,
        help="a file's lease expires after this long without a heartbeat (then others take over)",
    )
    parser.add_argument("--max-attempts", type=int, default=3, help="failures of one file that fail the run")
    parser.add_argument("--dry-run", action="store_true", help="preflight and plan only")
    engine = parser.add_argument_group("datatrove executors (slurm, ray)")
    engine.add_argument("--tasks", type=int, default=0, help="datatrove tasks (default: --workers)")
    engine.add_argument("--partition", default=None)
    engine.add_argument("--time", default="24:00:00")
    engine.add_argument("--cpus-per-task", type=int, default=2)
    engine.add_argument("--mem-per-cpu-gb", type=float, default=2.0)
    engine.add_argument("--logging-dir", default=None)
    engine.add_argument(
        "--venv-path", default=None, help="activate script the SLURM jobs source (e.g. /path/to/.venv/bin/activate)"
    )


def build_parser() -> argparse.ArgumentParser:
    from robostream.synth import SynthConfig

    defaults = {f.name: f.default for f in fields(SynthConfig)}
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="robostream", description=__doc__)
    parser.add_argument("--version", action="version", version=f"robostream {version('robostream')}")
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="generate the deterministic sample dataset (LeRobot v3.0)")
    synth.add_argument("out")
    for name in ("episodes", "cameras", "height", "width", "fps", "episode_length", "gop", "crf", "seed"):
        synth.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=defaults[name])
    synth.add_argument("--codec", choices=["av1", "h264"], default=defaults["codec"])
    synth.add_argument("--data-file-mb", dest="data_file_mb", type=float, default=defaults["data_file_mb"])
    synth.add_argument("--video-file-mb", dest="video_file_mb", type=float, default=defaults["video_file_mb"])
    synth.add_argument(
        "--codebase-version",
        dest="codebase_version",
        choices=["v3.0", "v2.1"],
        default=defaults["codebase_version"],
        help="v2.1 writes the converter's input layout",
    )
    synth.add_argument(
        "--content",
        choices=["noisy", "smooth"],
        default=defaults["content"],
        help="noisy: per-camera sensor noise (costly to decode); smooth: lerobot-like clean scenes",
    )
    synth.add_argument(
        "--language",
        action="store_true",
        help="add lerobot-annotate's language columns (language_persistent, language_events)",
    )
    synth.add_argument(
        "--depth",
        type=int,
        default=defaults["depth"],
        help="depth cameras (after the RGB ones), written as lerobot 0.6.1 writes them: float metres "
        "as 12-bit log codes in lossless HEVC",
    )
    synth.add_argument(
        "--depth-block",
        dest="depth_block",
        choices=["info", "video_info"],
        default=defaults["depth_block"],
        help="v2.1 only: the key of a depth camera's legacy block (video_info: the older spelling)",
    )
    synth.add_argument("--jobs", type=int, default=None, help="encoding processes (default: all cores)")
    synth.add_argument("--overwrite", action="store_true")
    synth.set_defaults(run=_synth)

    inspect = sub.add_parser("inspect", help="summarise a dataset and check its files")
    inspect.add_argument("root")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(run=_inspect)

    convert = sub.add_parser(
        "convert",
        help="convert a LeRobot v2.1 dataset to v3.0 (lerobot 0.6.1's output; parallel, distributed, resumable)",
    )
    add_convert_arguments(convert)
    convert.set_defaults(run=_convert)
    transcode = sub.add_parser(
        "transcode",
        help="re-encode a v3.0 dataset's cameras for GPU decoding (no B-frames, a keyframe every --gop frames, "
        "timestamps kept; on convert's executors, resumable)",
    )
    transcode.add_argument("src", help="the v3.0 dataset folder (read only)")
    transcode.add_argument("out", help="where the transcoded dataset appears when complete (must not exist)")
    transcode.add_argument("--codec", required=True, help="h264, hevc or av1 (NVDEC on A100/H100/H200: no av1)")
    transcode.add_argument("--gop", type=int, required=True, help="a keyframe every GOP frames (1: every frame)")
    transcode.add_argument("--crf", type=int, default=None, help="quality (default: h264 23, hevc 28, av1 30)")
    transcode.add_argument(
        "--preset", default=None, help="encoder speed preset (default: h264 veryfast, hevc fast, av1 12)"
    )
    transcode.add_argument(
        "--cameras", nargs="+", default=None, help="cameras to re-encode (default: every RGB video camera)"
    )
    pushing = transcode.add_mutually_exclusive_group()
    pushing.add_argument("--push", metavar="REPO_ID", default=None, help="push the result to this Hub dataset")
    pushing.add_argument("--no-push", action="store_true", help="no Hub mutation at all (the default)")
    transcode.add_argument("--branch", default="main", help="the branch --push writes (tag v3.0 last)")
    add_engine_arguments(transcode)
    transcode.set_defaults(run=_transcode)
    verify = sub.add_parser("verify", help="check a v3.0 dataset's rows, frame counts and first/last frames")
    verify.add_argument("root")
    verify.add_argument("--tolerance-s", type=float, default=1e-4)
    verify.set_defaults(run=_verify)

    from robostream.bench.arguments import add_bench_arguments, add_report_arguments

    bench = sub.add_parser(
        "bench",
        help="dataloading benchmark (dummy consumer): throughput, latency, memory, "
        "randomness, against lerobot and the raw-decode limit",
    )
    add_bench_arguments(bench)
    bench.set_defaults(run=_bench)
    report = sub.add_parser("bench-report", help="markdown table and PNG plots from `bench --out` results")
    add_report_arguments(report)
    report.set_defaults(run=_bench_report)
    # Listed for --help only: `main` hands `robostream train ...` to lerobot's own parser before argparse sees it.
    sub.add_parser(
        "train",
        add_help=False,
        help="lerobot-train (lerobot 0.6's flags: --policy.type=..., --dataset.repo_id=...) on robostream's "
        "datasets: `robostream train --help` lists every flag",
    )
    return parser


def _train(argv: list[str]) -> int:
    """`robostream train ...`: lerobot's draccus parser reads the flags (sys.argv), as `lerobot-train` does."""
    try:
        from robostream.lerobot.train import main as train_main
    except ImportError as exc:
        print(
            f"robostream train: error: needs lerobot 0.6 and accelerate in this environment ({exc}): pip install "
            "'lerobot[training]'",
            file=sys.stderr,
        )
        return 2
    sys.argv = ["robostream train", *argv]
    train_main()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        return _train(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (RobostreamError, FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"robostream {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
