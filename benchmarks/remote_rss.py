"""Stream a local dataset over HTTP (a Range-capable server on 127.0.0.1) and record peak process-tree RSS, bytes
fetched vs file sizes, and reader wait time, for a given read buffer. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/remote_rss.py out/sample --read-buffer 32mb --batches 60
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from torch.utils.data import DataLoader

from robostream import ReadOptions, StreamingLeRobotDataset
from tests.remote.servers import RangeHTTPServer


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
            with open(f"/proc/{current}/task/{current}/children") as fh:
                stack.extend(int(c) for c in fh.read().split())
        except (FileNotFoundError, StopIteration, ProcessLookupError):
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--read-buffer", default="32mb")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--local", action="store_true", help="read the folder directly (the RSS reference)")
    args = parser.parse_args()
    root = Path(args.root)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_bytes(os.getpid()))
            stop.wait(0.1)

    with RangeHTTPServer(root) as server:
        dataset = StreamingLeRobotDataset(
            root=root if args.local else server.url,
            return_uint8=True,
            read_options=ReadOptions(read_buffer=args.read_buffer),
        )
        baseline = tree_rss_bytes(os.getpid())
        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        start, samples = time.perf_counter(), 0
        for i, batch in enumerate(DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers)):
            samples += len(batch["index"])
            if i + 1 >= args.batches:
                break
        elapsed = time.perf_counter() - start
        stop.set()
        watcher.join()
        counts = dataset.frame_counts()
        served = sum(s["bytes"] for s in server.stats().values())
    videos = sum(p.stat().st_size for p in root.rglob("*.mp4"))
    print(
        json.dumps(
            {
                "source": "local" if args.local else "http",
                "read_buffer": args.read_buffer,
                "samples": samples,
                "samples_per_s": round(samples / elapsed, 1),
                "dataset_video_mib": round(videos / 2**20, 1),
                "rss_baseline_mib": round(baseline / 2**20, 1),
                "rss_peak_mib": round(peak[0] / 2**20, 1),
                "block_bytes_peak_mib": round(counts["block_bytes_peak"] / 2**20, 1),
                "bytes_fetched_by_workers_mib": round(counts["bytes_read"] / 2**20, 1),
                "bytes_served_mib": round(served / 2**20, 1),
                "read_wait_s": round(counts["read_wait_us"] / 1e6, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
