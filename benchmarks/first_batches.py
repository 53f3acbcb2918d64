"""The start of a streaming pass: seconds from `iter()` to the 1st, 10th and 80th batch, local or from a slow store.

Each run is a fresh process (imports done, dataset constructed before the clock, as a training job's pass starts)
with a `StreamingDataLoader` of 2 workers and batch 32; the store (robostream/testing/slow_store.py: first-byte
latency, `--store_mbps` MB/s per connection, 100 as issue 35 and the bench's `--store_mbps 100`; the figures before
the twelfth session's were taken at 12.5, i.e. 100 Mbit/s) runs in a process of its own. Run from the repository root, alternating trees
to compare them (PYTHONPATH=<worktree>):

    PYTHONPATH=. .venv/bin/python benchmarks/first_batches.py /tmp/ds160 --latency_ms 50
    PYTHONPATH=. .venv/bin/python benchmarks/first_batches.py /tmp/ds160 --local
    PYTHONPATH=. .venv/bin/python benchmarks/first_batches.py /tmp/ds160 --latency_ms 50 --read_buffer 48mb

Prints one JSON line per run: the CPU seconds the loader's processes spent by the 80th batch (this process and its
DataLoader workers), and from a store also the CPU seconds it spent, the MB it served and the requests it answered by then, on this machine's
cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

MARKS = (1, 10, 80)  # the batches whose arrival is reported
STORE_PROCESS = "slow-store"  # the store's process, whose CPU is not the loader's


def _serve(folder: str, latency_s: float, conn: Connection, bandwidth: float = 100e6) -> None:
    from robostream.testing.slow_store import RangeHTTPServer

    with RangeHTTPServer(folder, latency_s=latency_s, bandwidth=bandwidth) as store:
        store.hash_files()  # no first request waits for a whole file's hash
        conn.send(store.url)
        while conn.recv() == "summary":  # until told to stop
            conn.send(store.summary(1.0))


@contextlib.contextmanager
def served(root: Path, *, local: bool, latency_ms: float, store_mbps: float) -> Iterator[tuple[str, Connection | None]]:
    """The dataset folder `root` as the reader names it: its path (`local`), or its URL on the slow store started in a
    process of its own for the block, with the pipe that asks the store for its summary."""
    if local:
        yield str(root.resolve()), None
        return
    conn, child = mp.get_context("spawn").Pipe()
    store = mp.get_context("spawn").Process(
        target=_serve, args=(str(root.resolve().parent), latency_ms / 1e3, child, store_mbps * 1e6), name=STORE_PROCESS
    )
    store.start()
    try:
        yield f"{conn.recv()}/{root.name}", conn
    finally:
        conn.send("stop")
        store.join(10)


def _client_cpu_s() -> float:
    """CPU seconds of this process and its DataLoader workers: the store's process left out."""
    from robostream.bench.probe import tree_cpu_s

    stores = [p.pid for p in mp.active_children() if p.name == STORE_PROCESS and p.pid is not None]
    return sum(tree_cpu_s(exclude=stores).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--latency_ms", type=float, default=50.0)
    parser.add_argument("--store_mbps", type=float, default=100.0, help="the store's bandwidth per connection, MB/s")
    parser.add_argument("--local", action="store_true", help="read the folder directly (no store)")
    parser.add_argument("--read_buffer", default=None, help="ReadOptions(read_buffer=), e.g. 48mb (default: its own)")
    args = parser.parse_args()

    from robostream import ReadOptions, StreamingLeRobotDataset
    from robostream.datasets.loader import StreamingDataLoader

    with served(args.root, local=args.local, latency_ms=args.latency_ms, store_mbps=args.store_mbps) as (root, conn):
        dataset = StreamingLeRobotDataset(root=root, read_options=ReadOptions(read_buffer=args.read_buffer))
        started, cpu = time.perf_counter(), _client_cpu_s()
        batches = iter(StreamingDataLoader(dataset, batch_size=32, num_workers=2))
        arrivals = {}
        for count in range(1, MARKS[-1] + 1):
            next(batches)
            if count in MARKS:
                arrivals[f"batch_{count}_s"] = round(time.perf_counter() - started, 3)
        arrivals["client_cpu_s"] = round(_client_cpu_s() - cpu, 2)
        if conn is not None:  # the store's CPU shares this machine's cores with the reader
            conn.send("summary")
            summary = conn.recv()
            arrivals.update(
                store_cpu_s=round(summary["cpu_s"], 2),
                store_mb=round(summary["bytes"] / 1e6, 1),
                store_requests=summary["requests"],
            )
        print(json.dumps({"where": "local" if args.local else f"store {args.latency_ms:g} ms", **arrivals}))


if __name__ == "__main__":
    main()
