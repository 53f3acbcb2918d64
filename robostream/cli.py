"""The `robostream` command: synth, inspect, bench."""

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
                         seed=args.seed)
    start = time.perf_counter()
    root = generate(args.out, config, overwrite=args.overwrite, jobs=args.jobs)
    print(f"wrote {root} in {time.perf_counter() - start:.1f}s")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from robostream.summary import describe, render

    summary = describe(args.root)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from robostream.bench.throughput import run_throughput
    from robostream.video.decoder import default_backend

    default_backend()  # import the decoder once up front, so the first configuration's latency is not inflated
    results = [run_throughput(args.root, mode=mode, loader=loader, batch_size=args.batch_size,
                              num_workers=args.num_workers, num_batches=args.num_batches, seed=args.seed,
                              video_backend=args.video_backend, pool_size=args.pool_size)
               for mode in args.mode for loader in args.loader]
    table = Table(title=f"robostream read throughput: {args.root} (batch {args.batch_size}, "
                        f"{args.num_workers} workers, uint8)")
    for column in ("mode", "loader", "samples/s", "frames/s", "first batch s", "decoded/delivered",
                   "MiB/live piece", "batch diversity (uniform)"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(r.mode, r.loader, f"{r.samples_per_s:.1f}", f"{r.frames_per_s:.1f}",
                      f"{r.first_batch_latency_s:.2f}",
                      "-" if r.decoded_per_delivered is None else f"{r.decoded_per_delivered:.3f}",
                      "-" if r.live_piece_mib is None else f"{r.live_piece_mib:.1f}",
                      f"{r.batch_diversity:.2f} ({r.uniform_batch_diversity:.2f})")
    Console(width=140).print(table)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump([r.as_dict() for r in results], fh, indent=2)
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
    synth.add_argument("--jobs", type=int, default=None, help="encoding processes (default: all cores)")
    synth.add_argument("--overwrite", action="store_true")
    synth.set_defaults(run=_synth)

    inspect = sub.add_parser("inspect", help="summarise a dataset and check its files")
    inspect.add_argument("root")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(run=_inspect)

    bench = sub.add_parser("bench", help="read-throughput benchmark through a torch DataLoader")
    bench.add_argument("root")
    bench.add_argument("--mode", nargs="+", choices=["single", "sarm"], default=["single", "sarm"])
    bench.add_argument("--loader", nargs="+", choices=["stream", "map"], default=["stream", "map"])
    bench.add_argument("--pool-size", dest="pool_size", type=int, default=8)
    bench.add_argument("--batch-size", dest="batch_size", type=int, default=32)
    bench.add_argument("--num-workers", dest="num_workers", type=int, default=2)
    bench.add_argument("--num-batches", dest="num_batches", type=int, default=30)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--video-backend", dest="video_backend", choices=["torchcodec", "pyav"], default=None)
    bench.add_argument("--json-out", dest="json_out", default=None)
    bench.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (RobostreamError, FileExistsError, ValueError) as exc:
        print(f"robostream {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
