"""One benchmark run in its own process: build a DataLoader, consume it like a training loop would, write a trace.

Every configuration (robostream's loaders and the `lerobot` peer alike) runs through this file in a fresh
interpreter, so all are measured the same way and the process-tree memory of one run does not leak into the next.
It imports only the standard library, numpy, torch and psutil (never robostream), because the peer runs it under
lerobot's own interpreter and torch:

    python probe.py SPEC.json TRACE.json

SPEC names a factory `"module:function"` or `"/path/file.py:function"` and its parameters. The factory returns a
dict with `loader` (an iterable of batches), `frames_per_sample` (camera frames in one sample) and optional
callables `counts()` (frames decoded/delivered, bytes read: whole-run totals) and `split(n)` (a single-process
pass over n samples that separates fetch from decode time). A map-style loader wraps its dataset in
`TimedMapDataset` so that every sample carries how long its worker took to produce it and the worker's decoder-cache
counters; a loader that assembles whole batches takes `BatchProbe` as its hook instead (each sample then carries its
batch's production time divided by the batch size).

SPEC's optional `cpu_affinity` (a list of core ids) pins the probe and every process it starts to those cores (the
benchmark's own store runs on the others). The trace's `client_cpu_s` is the CPU of the probe's process tree over
the timed window (see `consume`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Protocol

import psutil
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

# What a worker attaches to each sample, in one float64 tensor (one small tensor per sample keeps the probe's cost
# low): production time (s), worker id (-1 in-process), then the worker's cumulative decoder-cache counters.
PROBE_KEY = "bench_probe"
CACHE_FIELDS = ("hits", "misses", "evictions", "size", "decoder_calls", "seeks")
RSS_INTERVAL_S = 0.05
PSS_INTERVAL_S = 2.0

WorkerStats = Callable[[], Mapping[str, float]] | None


def _probe_row(seconds: float, worker_stats: WorkerStats) -> list[float]:
    """Production time, worker id (-1 in-process), then the worker's cumulative decoder-cache counters."""
    info = get_worker_info()
    values = [seconds, info.id if info is not None else -1]
    if worker_stats is not None:
        stats = worker_stats()
        values.extend(float(stats.get(k, 0)) for k in CACHE_FIELDS)
    return values


def _instrument(sample: dict[str, Any], seconds: float, worker_stats: WorkerStats) -> dict[str, Any]:
    sample[PROBE_KEY] = torch.tensor(_probe_row(seconds, worker_stats), dtype=torch.float64)
    return sample


def instrument_batch(batch: dict[str, Any], seconds: float, worker_stats: WorkerStats = None) -> None:
    """For a batch assembled whole: every sample gets the batch's production time divided by its size (there is no
    per-sample time), the worker and the worker's cache counters, as `_instrument` gives a sample. As a list, not a
    tensor: a tensor outside the batch's buffer would cross to the main process as shared memory of its own, the
    only one of the batch (batch_buffers.py), and cost the loader it measures a file descriptor per batch."""
    size = len(batch[next(k for k in batch if isinstance(batch[k], torch.Tensor))])
    batch[PROBE_KEY] = [_probe_row(seconds / max(1, size), worker_stats)] * size


class BatchProbe:
    """A StreamingDataLoader `on_batch` hook that instruments each batch (picklable for spawned workers)."""

    def __init__(self, worker_stats: WorkerStats = None) -> None:
        self.worker_stats = worker_stats

    def __call__(self, batch: dict[str, Any], seconds: float) -> None:
        instrument_batch(batch, seconds, self.worker_stats)


class SampleDataset(Protocol):
    """What TimedMapDataset wraps: a sized map-style dataset of sample dicts (robostream's, lerobot's, LanceDB's)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, Any]: ...


class TimedMapDataset(Dataset):
    """A map-style dataset whose samples also carry their production time and the worker's cache counters."""

    def __init__(self, inner: SampleDataset, worker_stats: WorkerStats = None) -> None:
        self.inner, self.worker_stats = inner, worker_stats
        inner_items = getattr(inner, "__getitems__", None)
        if inner_items is not None:  # a dataset that serves a batch's indices at once is timed that way
            self._inner_items: Callable[[list[int]], list[dict[str, Any]]] = inner_items
            self.__getitems__ = self._timed_items

    def _timed_items(self, indices: list[int]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        samples = self._inner_items(indices)
        seconds = (time.perf_counter() - start) / max(1, len(samples))
        return [_instrument(sample, seconds, self.worker_stats) for sample in samples]

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> dict[str, Any]:
        start = time.perf_counter()
        sample = self.inner[index]
        return _instrument(sample, time.perf_counter() - start, self.worker_stats)


class TimedIterableDataset(IterableDataset):
    """An iterable dataset whose samples carry how long the worker took to produce each (from asking for it to
    having it), as TimedMapDataset's do."""

    def __init__(self, inner: IterableDataset, worker_stats: WorkerStats = None) -> None:
        self.inner, self.worker_stats = inner, worker_stats

    def __iter__(self) -> Iterator[dict[str, Any]]:
        samples = iter(self.inner)
        while True:
            start = time.perf_counter()
            sample = next(samples, None)
            if sample is None:
                return
            yield _instrument(sample, time.perf_counter() - start, self.worker_stats)


class MemorySampler:
    """Peak memory of this process and all its descendants (DataLoader workers), sampled in a thread.

    RSS (every `interval_s`) is summed over processes, so pages shared by forked workers and shared-memory batches
    count once per process that maps them: an upper bound, the same for every loader measured this way. PSS
    (proportional set size: shared pages divided among their processes) is the fairer figure but costs a page-table
    walk per process (~40 ms for a loader's tree), so it is sampled only every `pss_interval_s`; with it the largest
    descendant's PSS (a DataLoader worker's: what each added worker costs).
    """

    def __init__(self, interval_s: float = RSS_INTERVAL_S, pss_interval_s: float = PSS_INTERVAL_S) -> None:
        self.interval_s, self.pss_every = interval_s, max(1, round(pss_interval_s / interval_s))
        self.peak = self.baseline = sum(self.tree_memory("rss"))
        pss = self.tree_memory("pss")
        self.peak_pss, self.peak_worker_pss = sum(pss), max(pss[1:], default=0)
        self._pss_lock = threading.Lock()  # the sampler thread and the consuming loop both take it
        self.cpu_s = 0.0  # the sampler thread's own CPU: the probe's cost, left out of the loader's (tree_cpu_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    @staticmethod
    def tree_memory(kind: str) -> list[int]:
        """Bytes of `kind` ("rss" or "pss") of this process, then of each of its descendants."""
        root = psutil.Process(os.getpid())
        sizes = []
        for process in [root, *root.children(recursive=True)]:
            try:
                sizes.append(process.memory_info().rss if kind == "rss" else _pss(process.pid))
            except (psutil.Error, OSError):  # a worker that exited between listing and reading
                pass
        return sizes

    def _run(self) -> None:
        ticks = 0
        while not self._stop.wait(self.interval_s):
            ticks += 1
            self.peak = max(self.peak, sum(self.tree_memory("rss")))
            if ticks % self.pss_every == 0:
                self.sample_pss()
            self.cpu_s = time.thread_time()

    def sample_pss(self) -> None:
        """Take the tree's PSS now (also at the end of the timed part: a run shorter than `pss_interval_s` would
        otherwise report the PSS from before its loader started)."""
        pss = self.tree_memory("pss")
        with self._pss_lock:
            self.peak_pss = max(self.peak_pss, sum(pss))
            self.peak_worker_pss = max([self.peak_worker_pss, *pss[1:]])

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, sum(self.tree_memory("rss")))


def _pss(pid: int) -> int:
    """Proportional set size of a process from /proc/<pid>/smaps_rollup (Linux 4.14+); 0 where unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def tree_cpu_s(*, exclude: Collection[int] = ()) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process ("main") and by its descendants ("children"): the
    live ones read from /proc, those that already exited and were reaped (DataLoader workers of a finished pass) from
    getrusage(RUSAGE_CHILDREN), so every process counts once whether it is still running or not.

    Args:
        exclude: pids of live descendants left out (a store this process serves the data from, not the loader's).
    """
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    children = reaped.ru_utime + reaped.ru_stime
    for process in psutil.Process().children(recursive=True):
        if process.pid in exclude:
            continue
        try:
            times = process.cpu_times()
        except psutil.Error:  # a worker that exited between listing and reading
            continue
        children += times.user + times.system + times.children_user + times.children_system
    return {"main": own.ru_utime + own.ru_stime, "children": children}


def pin_process(cores: list[int]) -> None:
    """Run every thread of this process on `cores` (threads and processes started later inherit it)."""
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cores)
        except ProcessLookupError:  # a thread that ended between listing and pinning
            pass


def load_factory(spec: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`package.module:function` or `/path/to/file.py:function`."""
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location(f"bench_factory_{abs(hash(target))}", target)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"factory {spec!r}: {target} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, name)


def _to_device(batch: Mapping[str, Any], device: torch.device) -> None:
    moved = [v.to(device, non_blocking=True) for v in batch.values() if isinstance(v, torch.Tensor)]
    if device.type == "cuda" and moved:
        torch.cuda.synchronize(device)


def _progress(total: int | None) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="batch", desc="bench", file=sys.stderr, disable=None, leave=False)


def consume(
    bundle: Mapping[str, Any],
    started: float,
    num_batches: int,
    warmup_batches: int,
    duration_s: float | None,
    device: str,
    sampler: MemorySampler,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Pull batches until `warmup_batches + num_batches` arrived or `duration_s` passed after the warm-up.

    Each record: arrival time (s since `started`, i.e. since dataset construction began), time the consumer waited
    for it, its samples' episodes and production times, and the latest cache counters of the worker(s) it came from.
    Also returns the CPU seconds of this process ("main", the memory sampler's own left out) and its workers
    ("children") over the timed window: from the last warm-up batch's arrival to the last batch's (or to the end of
    the pass), the window samples/s is measured over; the batches prefetched ahead at both ends balance.
    """
    target = torch.device(device)
    records: list[dict[str, Any]] = []
    progress = _progress(warmup_batches + num_batches if duration_s is None else None)
    batches = iter(bundle["loader"])
    timed_from = None
    cpu_from = tree_cpu_s() if warmup_batches == 0 else None
    cpu_sampler_from = sampler.cpu_s
    while len(records) < warmup_batches + num_batches:
        asked = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            break
        arrived = time.perf_counter()
        _to_device(batch, target)
        probe = batch[PROBE_KEY]  # samples' tensors collated, or a batch's rows (instrument_batch)
        probe = probe.tolist() if isinstance(probe, torch.Tensor) else probe
        record = {
            "arrival_s": arrived - started,
            "wait_s": arrived - asked,
            "episodes": batch["episode_index"].tolist(),
            "sample_s": [p[0] for p in probe],
        }
        if "dataset_index" in batch:  # a mixture: which source each sample came from
            record["sources"] = batch["dataset_index"].tolist()
        if len(probe[0]) > 2:  # the last sample of each worker holds its latest cache counters
            record["worker_stats"] = {str(int(p[1])): p[2:] for p in probe}
        records.append(record)
        if progress is not None:
            progress.update(1)
        if len(records) == warmup_batches:
            timed_from = arrived
            cpu_from, cpu_sampler_from = tree_cpu_s(), sampler.cpu_s
        if duration_s is not None and timed_from is not None and arrived - timed_from >= duration_s:
            break
    cpu_to = tree_cpu_s()
    sampler.sample_pss()  # the workers are still up, holding what the timed part grew
    cpu = (
        {
            "main": cpu_to["main"] - cpu_from["main"] - (sampler.cpu_s - cpu_sampler_from),
            "children": cpu_to["children"] - cpu_from["children"],
        }
        if cpu_from is not None
        else {}
    )
    del batches  # shuts the workers down before the memory sampler stops...
    if getattr(bundle["loader"], "_iterator", None) is not None:
        bundle["loader"]._iterator = None  # ...also persistent ones, which the DataLoader itself keeps alive
    if progress is not None:
        progress.close()
    return records, cpu


def run(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Build the loader named by `spec`, consume it, and return the trace (JSON-serialisable)."""
    if spec.get("cpu_affinity"):
        pin_process(spec["cpu_affinity"])
    factory = load_factory(spec["factory"])
    with MemorySampler() as rss:
        started = time.perf_counter()
        bundle = factory(dict(spec["params"]))
        built = time.perf_counter()
        records, cpu = consume(
            bundle,
            started,
            int(spec["num_batches"]),
            int(spec["warmup_batches"]),
            spec.get("duration_s"),
            spec.get("device", "cpu"),
            rss,
        )
        counts = bundle["counts"]() if bundle.get("counts") else None
    split = bundle["split"](int(spec["split_samples"])) if bundle.get("split") and spec.get("split_samples") else None
    return {
        "records": records,
        "built_s": built - started,
        "frames_per_sample": bundle["frames_per_sample"],
        "counts": counts,
        "split": split,
        "peak_rss_bytes": rss.peak,
        "baseline_rss_bytes": rss.baseline,
        "peak_pss_bytes": rss.peak_pss,
        "peak_worker_pss_bytes": rss.peak_worker_pss,
        "client_cpu_s": cpu,
        "info": {**bundle.get("info", {}), "cpu_affinity": sorted(os.sched_getaffinity(0))},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python probe.py SPEC.json TRACE.json", file=sys.stderr)
        return 2
    with open(argv[0]) as fh:
        spec = json.load(fh)
    trace = run(spec)
    tmp = f"{argv[1]}.tmp"
    with open(tmp, "w") as fh:
        json.dump(trace, fh)
    os.replace(tmp, argv[1])  # a crashed run leaves no trace file that looks complete
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
