"""Constructing a mixture of N one-episode sources from a slow store, cold (an empty node cache) then warm (the same
node cache, a new dataset), in one process. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/mixture_construction.py /tmp/manysrc --sources 500 --api http
    PYTHONPATH=. .venv/bin/python benchmarks/mixture_construction.py /tmp/manysrc --sources 300 --api local

FOLDER/one is a one-episode dataset (generated when missing: 3 cameras of 48x64, 34 frames) and FOLDER/src-000 ...
are copies of it made of hard links. The store (robostream/testing/: slow_store.py HTTP, s3_dialect.py S3,
hub_store.py the Hub emulator, sources pinned to its commit) serves FOLDER's parent with --latency_ms first-byte
latency, in a process of its own (`--store_in_process`: in this one, as before 2026-11-27, its threads then share
the reader's interpreter lock and CPU figure); `--api local` reads the folders directly (no store). Per run it
prints one JSON line: construction seconds, this process's CPU seconds, the seconds in the cyclic garbage collector
and how many of its passes were full ones (~0.2 s each: every third construction of 100 sources landed one until
the sources opened with the collector paused), and for a store the requests it
served, the most in flight and its CPU seconds (it shares the machine with the reader).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class _Collections:
    """The cyclic garbage collector's passes while counting: how many were full (generation 2) and their seconds.
    A full pass walks every object of the process (torch's, sympy's, ...: ~0.2 s here) and comes every few
    constructions, whichever it lands in: the figure to set aside when comparing runs."""

    def __init__(self) -> None:
        self.full, self.seconds, self._started = 0, 0.0, 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        self.full += info["generation"] == 2

    def reset(self) -> None:
        self.full, self.seconds = 0, 0.0


def _construct(urls: list[str], options: dict, store, label: str, api: str, collections: _Collections) -> None:
    """`store` None: local folders (no store to count)."""
    if store is not None:
        store.reset_stats()
    collections.reset()
    started, cpu = time.perf_counter(), time.process_time()
    StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=url) for url in urls]), read_options=ReadOptions(**options)
    )
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    line = {
        "api": api,
        "sources": len(urls),
        "run": label,
        "construction_s": round(took, 2),
        "cpu_s": round(cpu, 2),
        "gc_s": round(collections.seconds, 2),
        "gc_full": collections.full,
    }
    if store is not None:
        summary = store.summary(took)
        line |= {
            "requests": summary["requests"],
            "in_flight_max": summary["in_flight_max"],
            "store_cpu_s": round(summary["cpu_s"], 2),
        }
    print(json.dumps(line), flush=True)


def _server(api: str, root: Path, latency: float, repos: dict[str, Path]) -> Any:
    if api == "hub":
        return HubServer(repos, latency_s=latency)
    return (RangeHTTPServer if api == "http" else S3RangeServer)(root, latency_s=latency)


def _where(api: str, store: Any) -> dict[str, Any]:
    """What a reader needs of a running store: its URL, S3 options, Hub endpoint and commit."""
    if api == "hub":
        return {"endpoint": store.endpoint, "sha": store.sha}
    return {"url": store.url} if api == "http" else {"storage_options": store.storage_options()}


def _serve(conn: Any, api: str, root: Path, latency: float, repos: dict[str, Path]) -> None:
    """The store's process: serves until told to stop, answering "reset" and ("summary", span_s)."""
    with _server(api, root, latency, repos) as store:
        conn.send(_where(api, store))
        while (command := conn.recv()) != "stop":
            if command == "reset":
                conn.send(store.reset_stats())
            else:
                conn.send(store.summary(command[1]))


class _Remote:
    """A store in its own process, asked for its counts over a pipe."""

    def __init__(self, conn: Any, where: dict[str, Any]) -> None:
        self._conn, self.where = conn, where

    def reset_stats(self) -> None:
        self._conn.send("reset")
        self._conn.recv()

    def summary(self, span_s: float) -> dict[str, Any]:
        self._conn.send(("summary", span_s))
        return self._conn.recv()


@contextlib.contextmanager
def _store(api: str, root: Path, latency: float, repos: dict[str, Path], in_process: bool) -> Iterator[Any]:
    """The store, and where it serves (`_where`)."""
    if in_process:
        with _server(api, root, latency, repos) as store:
            yield store, _where(api, store)
        return
    conn, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_serve, args=(child, api, root, latency, repos))
    process.start()
    try:
        if not conn.poll(120):
            raise RuntimeError(f"the {api} store's process did not start serving within 120 s")
        remote = _Remote(conn, conn.recv())
        yield remote, remote.where
        conn.send("stop")
    finally:
        process.join(30)
        if process.exitcode is None:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sources", type=int, default=500)
    parser.add_argument("--api", choices=["local", "http", "s3", "hub"], default="http")
    parser.add_argument("--latency_ms", type=float, default=50.0)
    parser.add_argument("--warm_runs", type=int, default=1, help="warm constructions after the cold one")
    parser.add_argument(
        "--store_in_process", action="store_true", help="run the store in this process (default: a process of its own)"
    )
    parser.add_argument(
        "--preload",
        action="store_true",
        help="import torchcodec and pandas before the clock (once-per-process imports a process that has read a "
        "dataset already paid; default: the first construction pays them, as in a fresh process)",
    )
    parser.add_argument(
        "--node_cache",
        type=Path,
        help="the node cache to use (default a new, empty one): a second invocation "
        "with the same folder measures a new process whose snapshots are current",
    )
    args = parser.parse_args()
    if args.preload:
        import pandas  # noqa: F401
        import torchcodec.decoders  # noqa: F401
    folder = args.folder.resolve()
    roots = _sources(folder, args.sources)
    node_cache = str(args.node_cache) if args.node_cache else tempfile.mkdtemp(prefix="node-cache-")
    os.environ["ROBOSTREAM_CACHE"] = node_cache  # cold (a new one), then warm
    # The first run in a given node cache: "first" (a new process; its snapshots current when the folder was used).
    labels = ["first" if args.node_cache else "cold", *(f"warm-{i}" for i in range(1, args.warm_runs + 1))]
    latency = args.latency_ms / 1000
    collections = _Collections()
    if args.api == "local":
        for label in labels:
            _construct([str(root) for root in roots], {}, None, label, args.api, collections)
        return
    repos = {f"local/{root.name}": root for root in roots}
    with _store(args.api, folder.parent, latency, repos, args.store_in_process) as (store, where):
        options: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:
            if args.api == "hub":
                stack.enter_context(hub_environment(where["endpoint"], Path(tempfile.mkdtemp())))
                urls = [f"hf://datasets/{repo}@{where['sha']}" for repo in repos]
            elif args.api == "http":
                urls = [f"{where['url']}/{folder.name}/{root.name}" for root in roots]
            else:
                urls = [f"s3://{folder.name}/{root.name}" for root in roots]
                options = {"storage_options": where["storage_options"]}
            for label in labels:
                _construct(urls, options, store, label, args.api, collections)


if __name__ == "__main__":
    main()
