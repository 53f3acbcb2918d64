"""Where a DataLoader worker's CPU goes per sample, thread by thread, local or from a slow store (issue 35).

The bench reports a run's client CPU per sample; this splits one worker's by thread, so a remote run's extra can
be put on what spends it: the loop (MainThread), the camera decode threads, the exact-range and read-ahead fetch
threads, obstore's runtime (tokio), the rows threads. One DataLoader worker runs the loader's own loop in its
steady state (after `--warmup` batches), pinned to one core (a worker's share where workers fill the cores, so it
decodes its cameras in turn as in the bench's 2-worker runs); the store (robostream/testing/slow_store.py, 100 MB/s per
connection) runs in its own process, on the other cores where there are any:
- `--loader map`: `LeRobotDataset.__getitems__` of random batches, one after the other (a plain shuffled DataLoader
  worker's calls; each waits its round trip, so wall time is not throughput here);
- `--loader stream`: `StreamingDataLoader(num_workers=0)` inside the worker (its batches are allocated as an
  in-process loader's, not in the shared slots a multi-worker loader reuses).

    PYTHONPATH=. .venv/bin/python benchmarks/worker_cpu_split.py /tmp/ds160 --loader map --local
    PYTHONPATH=. .venv/bin/python benchmarks/worker_cpu_split.py /tmp/ds160 --loader map --latency_ms 50

Prints one JSON line: CPU and wall ms per sample, and CPU ms per sample of each thread family (Python threads by
name, numbered suffixes dropped; native threads by their kernel name; "(ended threads)": the rest of the process's
CPU, spent by threads gone by the end). Thread CPU comes from /proc (Linux only). Camera frames come as the
datasets return them by default (float).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from first_batches import served
from torch.utils.data import DataLoader, IterableDataset


def _thread_cpu_s() -> collections.Counter[str]:
    """CPU seconds of this process's threads so far, summed per thread family."""
    names = {t.native_id: re.sub(r"[-_]?\d+(_\d+)?$", "", t.name) for t in threading.enumerate()}
    spent: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        try:  # schedstat's first field: the thread's CPU time in ns (stat's ticks are 10 ms apart)
            with open(f"/proc/self/task/{tid}/schedstat") as stat, open(f"/proc/self/task/{tid}/comm") as comm:
                cpu_ns, kernel_name = int(stat.read().split()[0]), comm.read().strip()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        spent[names.get(int(tid), f"native:{kernel_name}")] += cpu_ns / 1e9
    return spent


class _Split(IterableDataset):
    """One item: the split of `batches` batches' CPU, measured in the worker after `warmup` batches."""

    def __init__(self, dataset: Any, *, loader: str, batches: int, warmup: int, batch_size: int) -> None:
        self.dataset, self.loader, self.batches, self.warmup, self.batch_size = (
            dataset,
            loader,
            batches,
            warmup,
            batch_size,
        )

    def _batches(self) -> Iterator[int]:
        """Sample counts of the worker's batches, produced as the chosen loader produces them."""
        if self.loader == "stream":
            from robostream.datasets.loader import StreamingDataLoader

            for batch in StreamingDataLoader(self.dataset, batch_size=self.batch_size, num_workers=0):
                yield len(batch["index"])
            return
        import numpy as np

        rng = np.random.default_rng(0)
        while True:
            yield len(self.dataset.__getitems__(rng.integers(0, len(self.dataset), self.batch_size).tolist()))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # one core: a worker's share
        batches = self._batches()
        for _ in itertools.islice(batches, self.warmup):
            pass
        before, cpu, wall = _thread_cpu_s(), time.process_time(), time.perf_counter()
        samples = sum(itertools.islice(batches, self.batches))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        spent = _thread_cpu_s()
        spent.subtract(before)
        # threads that ended before the second look (or began and ended between the looks) appear in no family
        spent["(ended threads)"] = max(0.0, cpu - sum(spent.values()))
        yield {
            "samples": samples,
            "cpu_ms_per_sample": round(1e3 * cpu / samples, 3),
            "wall_ms_per_sample": round(1e3 * wall / samples, 3),
            "threads_cpu_ms_per_sample": {name: round(1e3 * s / samples, 3) for name, s in spent.most_common() if s},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--loader", choices=("map", "stream"), default="map")
    parser.add_argument("--latency_ms", type=float, default=50.0)
    parser.add_argument("--store_mbps", type=float, default=100.0, help="the store's bandwidth per connection, MB/s")
    parser.add_argument("--local", action="store_true", help="read the folder directly (no store)")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()

    import torch

    from robostream import LeRobotDataset, StreamingLeRobotDataset

    # The worker takes the last core (see _Split): the store, started first, the others where there are any.
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(cores[:-1]) or set(cores))
    with served(args.root, local=args.local, latency_ms=args.latency_ms, store_mbps=args.store_mbps) as (root, _):
        os.sched_setaffinity(0, set(cores))
        torch.set_num_threads(1)  # as in DataLoader workers
        dataset = LeRobotDataset(root=root) if args.loader == "map" else StreamingLeRobotDataset(root=root)
        split = _Split(
            dataset, loader=args.loader, batches=args.batches, warmup=args.warmup, batch_size=args.batch_size
        )
        result = next(iter(DataLoader(split, batch_size=None, num_workers=1)))
        where = "local" if args.local else f"store {args.latency_ms:g} ms"
        print(json.dumps({"where": where, "loader": args.loader, **result}))


if __name__ == "__main__":
    main()
