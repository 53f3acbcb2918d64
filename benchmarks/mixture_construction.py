"""Constructing a mixture of N one-episode sources from a slow store, cold (an empty node cache) then warm (the same
node cache, a new dataset), in one process. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/mixture_construction.py /tmp/manysrc --sources 500 --api http

FOLDER/one is a one-episode dataset (generated when missing: 3 cameras of 48x64, 34 frames) and FOLDER/src-000 ...
are copies of it made of hard links. The store (robostream/testing/: slow_store.py HTTP, s3_dialect.py S3,
hub_store.py the Hub emulator, sources pinned to its commit) serves FOLDER's parent with --latency_ms first-byte
latency. Per run it prints one JSON line: construction seconds, the requests the store served, the most in flight
and the store's CPU seconds (it shares the machine with the reader).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from robostream import Mixture, ReadOptions, Source, StreamingLeRobotDataset
from robostream.synth import SynthConfig, generate
from robostream.testing.hub_store import HubServer, hub_environment
from robostream.testing.s3_dialect import S3RangeServer
from robostream.testing.slow_store import RangeHTTPServer

ONE = SynthConfig(episodes=1, cameras=3, height=48, width=64, episode_length=30, state_dim=6, seed=1)


def _sources(folder: Path, count: int) -> list[Path]:
    if not (folder / "one").is_dir():
        generate(folder / "one", ONE)
    roots = [folder / f"src-{i:03d}" for i in range(count)]
    for root in roots:
        if not root.exists():
            shutil.copytree(folder / "one", root, copy_function=os.link)
    return roots


def _construct(urls: list[str], options: dict, store, label: str, api: str) -> None:
    store.reset_stats()
    started = time.perf_counter()
    StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=url) for url in urls]), read_options=ReadOptions(**options)
    )
    took = time.perf_counter() - started
    summary = store.summary(took)
    print(
        json.dumps(
            {
                "api": api,
                "sources": len(urls),
                "run": label,
                "construction_s": round(took, 2),
                "requests": summary["requests"],
                "in_flight_max": summary["in_flight_max"],
                "store_cpu_s": round(summary["cpu_s"], 2),
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sources", type=int, default=500)
    parser.add_argument("--api", choices=["http", "s3", "hub"], default="http")
    parser.add_argument("--latency_ms", type=float, default=50.0)
    args = parser.parse_args()
    folder = args.folder.resolve()
    roots = _sources(folder, args.sources)
    os.environ["ROBOSTREAM_CACHE"] = tempfile.mkdtemp(prefix="node-cache-")  # cold, then warm
    latency = args.latency_ms / 1000
    if args.api == "hub":
        repos = {f"local/{root.name}": root for root in roots}
        with HubServer(repos, latency_s=latency) as store, hub_environment(store.endpoint, Path(tempfile.mkdtemp())):
            urls = [f"hf://datasets/{repo}@{store.sha}" for repo in repos]
            for label in ("cold", "warm"):
                _construct(urls, {}, store, label, args.api)
        return
    server = RangeHTTPServer if args.api == "http" else S3RangeServer
    with server(folder.parent, latency_s=latency) as store:
        if args.api == "http":
            urls, options = [f"{store.url}/{folder.name}/{root.name}" for root in roots], {}
        else:
            urls = [f"s3://{folder.name}/{root.name}" for root in roots]
            options = {"storage_options": store.storage_options()}
        for label in ("cold", "warm"):
            _construct(urls, options, store, label, args.api)


if __name__ == "__main__":
    main()
