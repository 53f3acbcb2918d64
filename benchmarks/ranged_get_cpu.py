"""Client CPU per ranged GET (RangedReader.fetch_range) against a loopback RangeHTTPServer in its own process.

The fetches run inside a DataLoader worker process (where robostream's reads run in training, and where the obstore
path is used: storage/object_ranges.py); the worker's own CPU seconds (all its threads: the fsspec loop, obstore's
runtime) are divided by the requests. Run the old tree with PYTHONPATH=<its checkout> for a before/after.
Beside it, the floor: the same ranges as plain keep-alive GETs through the standard library's http.client (a
connection per thread, no checks), the machine's own cost of a request and its answer.

    python benchmarks/ranged_get_cpu.py --requests 300 --sizes 16384 131072 --threads 1 8
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from torch.utils.data import DataLoader, Dataset

FILE_SIZE = 64 << 20


def _serve(root: str, port_out: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    from robostream.testing.slow_store import RangeHTTPServer

    with RangeHTTPServer(root) as server:
        port_out.put(server.url)
        stop.wait()


class _Fetches(Dataset):
    """One item: `requests` random ranges of `size` bytes fetched with `threads` threads; the worker's CPU and wall."""

    def __init__(self, url: str, size: int, threads: int, requests: int) -> None:
        self.url, self.size, self.threads, self.requests = url, size, threads, requests

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict:
        from robostream.storage.options import ReadOptions
        from robostream.storage.store import RangedReader, Storage

        storage = Storage(self.url, ReadOptions())
        version = storage.stat("data.bin")
        reader = RangedReader(storage, f"{storage.root}/data.bin", "data.bin", version)
        rng = random.Random(0)
        starts = [rng.randrange(0, FILE_SIZE - self.size) for _ in range(self.requests)]
        for start in starts[:20]:  # warm: connections opened, clients built
            reader.fetch_range(start, start + self.size)
        cpu, wall = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(lambda s: reader.fetch_range(s, s + self.size), starts))
        figures = {
            "cpu_ms_per_get": (time.process_time() - cpu) * 1e3 / self.requests,
            "wall_ms_per_get": (time.perf_counter() - wall) * 1e3 / self.requests,
            "obstore": getattr(storage, "object_ranges", None) is not None,  # the old tree has none
        }
        return {**figures, **self._floor(starts)}

    def _floor(self, starts: list[int]) -> dict:
        """The same ranges as plain keep-alive GETs (http.client, a connection per thread)."""
        where = urlsplit(self.url)
        local = threading.local()

        def get(start: int) -> None:
            if not hasattr(local, "connection"):
                local.connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
            local.connection.request(
                "GET", f"{where.path.rstrip('/')}/data.bin", headers={"Range": f"bytes={start}-{start + self.size - 1}"}
            )
            answer = local.connection.getresponse()
            if answer.status != 206 or len(answer.read()) != self.size:
                raise RuntimeError(f"GET {start}: {answer.status}")

        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(get, starts[:20]))  # warm: connections opened
            cpu, wall = time.process_time(), time.perf_counter()
            list(pool.map(get, starts))
        return {
            "floor_cpu_ms_per_get": (time.process_time() - cpu) * 1e3 / self.requests,
            "floor_wall_ms_per_get": (time.perf_counter() - wall) * 1e3 / self.requests,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16 << 10, 128 << 10])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        Path(root, "data.bin").write_bytes(os.urandom(FILE_SIZE))
        context = multiprocessing.get_context("spawn")
        port_out, stop = context.Queue(), context.Event()
        server = context.Process(target=_serve, args=(root, port_out, stop), daemon=True)
        server.start()
        url = port_out.get(timeout=60)
        try:
            for size in args.sizes:
                for threads in args.threads:
                    loader = DataLoader(_Fetches(url, size, threads, args.requests), batch_size=None, num_workers=1)
                    result = next(iter(loader))
                    print(json.dumps({"size": size, "threads": threads, **result}), flush=True)
        finally:
            stop.set()
            server.join(10)


if __name__ == "__main__":
    main()
