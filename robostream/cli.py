"""The `robostream` command: synth, inspect, bench, bench-report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields

from robostream.errors import RobostreamError


def _synth(args: argparse.Namespace) -> int:
    from robostream.synth import SynthConfig, generate

    config = SynthConfig(episodes=args.episodes, cameras=args.cameras, height=args.height, width=args.width,
                         fps=args.fps, episode_length=args.episode_length, codec=args.codec, gop=args.gop,
                         crf=args.crf, data_file_mb=args.data_file_mb, video_file_mb=args.video_file_mb,
                         seed=args.seed, codebase_version=args.codebase_version)
    start = time.perf_counter()
    root = generate(args.out, config, overwrite=args.overwrite, jobs=args.jobs)
    print(f"wrote {root} in {time.perf_counter() - start:.1f}s")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from robostream.summary import describe, render

    summary = describe(args.root)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from robostream.synth import SynthConfig

    defaults = {f.name: f.default for f in fields(SynthConfig)}
    parser = argparse.ArgumentParser(prog="robostream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="generate the deterministic sample dataset (LeRobot v3.0)")
    synth.add_argument("out")
    for name in ("episodes", "cameras", "height", "width", "fps", "episode_length", "gop", "crf", "seed"):
        synth.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=defaults[name])
    synth.add_argument("--codec", choices=["av1", "h264"], default=defaults["codec"])
    synth.add_argument("--data-file-mb", dest="data_file_mb", type=float, default=defaults["data_file_mb"])
    synth.add_argument("--video-file-mb", dest="video_file_mb", type=float, default=defaults["video_file_mb"])
    synth.add_argument("--codebase-version", dest="codebase_version", choices=["v3.0", "v2.1"],
                       default=defaults["codebase_version"], help="v2.1 writes the converter's input layout")
    synth.add_argument("--jobs", type=int, default=None, help="encoding processes (default: all cores)")
    synth.add_argument("--overwrite", action="store_true")
    synth.set_defaults(run=_synth)

    inspect = sub.add_parser("inspect", help="summarise a dataset and check its files")
    inspect.add_argument("root")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(run=_inspect)

    from robostream.bench.command import add_bench_arguments, add_report_arguments, run_bench, run_report

    bench = sub.add_parser("bench", help="dataloading benchmark (dummy consumer): throughput, latency, memory, "
                                         "randomness, against lerobot and the raw-decode limit")
    add_bench_arguments(bench)
    bench.set_defaults(run=run_bench)
    report = sub.add_parser("bench-report", help="markdown table and PNG plots from `bench --out` results")
    add_report_arguments(report)
    report.set_defaults(run=run_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (RobostreamError, FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"robostream {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
