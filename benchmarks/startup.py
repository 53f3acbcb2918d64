"""Start-up cost of a dataset loader as a function of dataset size: construction time and memory, first batch, peak
memory while reading, for robostream's streaming and map-style datasets and for lerobot's own LeRobotDataset.
Issue "Start-up and memory flat in dataset size". Run from the repository root, e.g. on datasets made by
benchmarks/make_scale_dataset.py:

    .venv/bin/python benchmarks/startup.py /work/scale/ds20k /work/scale/ds100k \\
        --which stream map lerobot --peer_python /work/lerovenv/bin/python --out startup.json

Every (root, loader, run) is measured in a FRESH subprocess running this same file with `--child` (its body imports
only the standard library, psutil, torch, torchcodec and the library under test, so the same child runs under
lerobot's interpreter). Inside the child, imports (torch, torchcodec, robostream or lerobot) happen BEFORE the timer;
then it measures:
  * construct_s / construct_rss_mb: wall time of `StreamingLeRobotDataset(root=ROOT)` / `LeRobotDataset(root=ROOT)` /
    lerobot's `LeRobotDataset(repo_id="local/x", root=ROOT)`, and the process RSS increase over it;
  * first_batch_s: from construction start to the first batch of a DataLoader with `--num_workers` workers
    (stream: `robostream.StreamingDataLoader(ds, batch_size, num_workers)`; map and lerobot:
    `torch.utils.data.DataLoader(ds, batch_size, shuffle=True, num_workers)`, the platform's default start method);
  * total_s: from construction start to `--batches` batches consumed;
  * peak_construct_mb / peak_tree_mb: peak RSS summed over the process and its children (the DataLoader workers),
    sampled by a thread every 0.2 s, during construction / over construction and the whole read. RSS counts pages
    shared between forked workers once per process; `--pss` also samples PSS (slower to read, more exact).

Each (root, loader) is run `--runs` times (default 2) in a row. The first run is "cold": before it, the dataset's
files are evicted from the page cache (fdatasync + posix_fadvise DONTNEED on each file: it only touches these files,
not the system's cache) and the child gets a fresh private cache folder (HF_HOME, HF_DATASETS_CACHE,
HF_LEROBOT_HOME, XDG_CACHE_HOME in a temporary directory), so lerobot's HF-datasets arrow cache is built from
scratch. The following runs are "warm": same cache folder, files in the page cache. lerobot children run with
HF_HUB_OFFLINE=1 and without this repository on PYTHONPATH; robostream children get the repository root appended
to PYTHONPATH (a PYTHONPATH you set comes first, so another copy of robostream can be measured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
RESULT_MARK = "STARTUP_RESULT "
WHICH = ("stream", "map", "lerobot")
MB = 1024 * 1024


# -- child: runs in a fresh interpreter (robostream's or lerobot's); stdlib, psutil, torch and the library only ----
class PeakSampler(threading.Thread):
    """Samples the RSS (and optionally PSS) summed over a process and its descendants every `interval` seconds."""

    def __init__(self, interval: float = 0.2, pss: bool = False) -> None:
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.proc = psutil.Process()
        self.interval, self.pss = interval, pss
        self.peak_rss = self.peak_pss = 0
        self.marks: dict[str, tuple[int, int]] = {}
        self.samples = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def sample(self) -> None:
        rss = pss = 0
        for proc in [self.proc, *self.proc.children(recursive=True)]:
            try:
                if self.pss:
                    info = proc.memory_full_info()
                    rss, pss = rss + info.rss, pss + info.pss
                else:
                    rss += proc.memory_info().rss
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied, self.psutil.ZombieProcess):
                continue
        with self._lock:
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.samples += 1

    def mark(self, name: str) -> None:
        """Record the peaks so far under `name` (a sample is taken first)."""
        self.sample()
        with self._lock:
            self.marks[name] = (self.peak_rss, self.peak_pss)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sample()


def child(cfg: dict) -> dict:
    started = time.perf_counter()
    import gc

    import psutil
    from torch.utils.data import DataLoader

    try:  # the decoder library both loaders use; imported before the timer like the rest
        import torchcodec.decoders  # noqa: F401
    except ImportError:
        pass
    which, root = cfg["which"], cfg["root"]
    if which == "lerobot":
        import lerobot
        from lerobot.datasets.lerobot_dataset import LeRobotDataset as PeerDataset

        version = getattr(lerobot, "__version__", "?")
    else:
        import robostream

        version = f"{robostream.__version__} ({Path(robostream.__file__).parent})"
    import_s = time.perf_counter() - started

    proc = psutil.Process()
    gc.collect()
    sampler = PeakSampler(0.2, cfg.get("pss", False))
    sampler.sample()
    sampler.start()
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    if which == "stream":
        ds = robostream.StreamingLeRobotDataset(root=root)
    elif which == "map":
        ds = robostream.LeRobotDataset(root=root)
    else:
        ds = PeerDataset(repo_id="local/x", root=root)
    construct_s = time.perf_counter() - t0
    rss1 = proc.memory_info().rss
    sampler.mark("construct")
    try:
        frames = len(ds)
    except TypeError:
        frames = getattr(ds, "num_frames", None)

    batch_size, workers = cfg["batch_size"], cfg["num_workers"]
    if which == "stream":
        loader = robostream.StreamingDataLoader(ds, batch_size=batch_size, num_workers=workers)
    else:
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers)
    batches = iter(loader)
    next(batches)
    first_batch_s = time.perf_counter() - t0
    consumed = 1
    for _ in batches:
        consumed += 1
        if consumed >= cfg["batches"]:
            break
    total_s = time.perf_counter() - t0
    sampler.stop()
    del batches  # shut the workers down before the process reports
    return {
        "version": version,
        "import_s": round(import_s, 3),
        "construct_s": round(construct_s, 3),
        "construct_rss_mb": round((rss1 - rss0) / MB, 1),
        "rss_after_construct_mb": round(rss1 / MB, 1),
        "first_batch_s": round(first_batch_s, 3),
        "total_s": round(total_s, 3),
        "batches": consumed,
        "frames": frames,
        "peak_construct_mb": round(sampler.marks["construct"][0] / MB, 1),
        "peak_tree_mb": round(sampler.peak_rss / MB, 1),
        **(
            {
                "peak_construct_pss_mb": round(sampler.marks["construct"][1] / MB, 1),
                "peak_tree_pss_mb": round(sampler.peak_pss / MB, 1),
            }
            if cfg.get("pss")
            else {}
        ),
        "samples": sampler.samples,
    }


# -- parent ---------------------------------------------------------------------------------------------------------
def evict_page_cache(root: Path) -> int:
    """Drop the dataset's own files from the page cache (flushes them first); returns the bytes covered."""
    total = 0
    if not hasattr(os, "posix_fadvise"):
        return 0
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return total


def child_env(which: str, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HOME=str(cache / "hf"),
        HF_DATASETS_CACHE=str(cache / "hf" / "datasets"),
        HF_LEROBOT_HOME=str(cache / "hf" / "lerobot"),
        XDG_CACHE_HOME=str(cache / "xdg"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        SVT_LOG="1",
    )
    if which == "lerobot":
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    return env


def run_child(python: str, cfg: dict, env: dict[str, str], timeout: float) -> dict:
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [python, str(HERE), "--child", json.dumps(cfg)],
            env=env,
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "process_s": round(time.perf_counter() - started, 1)}
    wall = round(time.perf_counter() - started, 2)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
            result["process_s"] = wall
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[-1500:], "process_s": wall}


def dataset_size(root: Path) -> tuple[int | None, int | None]:
    try:
        info = json.loads((root / "meta" / "info.json").read_text())
        return info.get("total_episodes"), info.get("total_frames")
    except (OSError, ValueError):
        return None, None


COLUMNS = (
    ("root", "root"),
    ("episodes", "episodes"),
    ("frames", "frames"),
    ("loader", "which"),
    ("run", "run"),
    ("construct s", "construct_s"),
    ("construct ΔRSS MB", "construct_rss_mb"),
    ("peak construct MB", "peak_construct_mb"),
    ("first batch s", "first_batch_s"),
    ("batches", "batches"),
    ("total s", "total_s"),
    ("peak tree RSS MB", "peak_tree_mb"),
    ("process s", "process_s"),
)


def markdown(results: list[dict], pss: bool) -> str:
    columns = list(COLUMNS)
    if pss:
        columns += [("peak construct PSS MB", "peak_construct_pss_mb"), ("peak tree PSS MB", "peak_tree_pss_mb")]
    lines = ["| " + " | ".join(c for c, _ in columns) + " |", "|" + "---|" * len(columns)]
    errors = []
    for r in results:
        cells = []
        for _, key in columns:
            value = r.get(key)
            if key == "root":
                value = Path(value).name
            cells.append(
                ""
                if value is None
                else f"{value:,}"
                if isinstance(value, int) and key in ("episodes", "frames")
                else str(value)
            )
        if "error" in r:
            cells[columns.index(("construct s", "construct_s"))] = "FAILED"
            errors.append(f"- {Path(r['root']).name} {r['which']} {r['run']}: {r['error']}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + ([""] + errors if errors else []))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("roots", nargs="*", type=Path, help="local v3.0 dataset roots")
    parser.add_argument(
        "--which",
        nargs="+",
        choices=WHICH,
        default=None,
        help="loaders to measure (default: stream map, plus lerobot when --peer_python is given)",
    )
    parser.add_argument(
        "--peer_python",
        "--peer-python",
        dest="peer_python",
        help="an interpreter with lerobot installed (for --which lerobot)",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the robostream children")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch_size", "--batch-size", dest="batch_size", type=int, default=32)
    parser.add_argument("--num_workers", "--num-workers", dest="num_workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2, help="runs per (root, loader): the first cold, then warm")
    parser.add_argument(
        "--no-evict",
        dest="evict",
        action="store_false",
        help="do not drop the dataset's files from the page cache before the cold run",
    )
    parser.add_argument("--pss", action="store_true", help="also sample PSS (reads smaps: slower, more exact)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per child process")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child is not None:
        result = child(json.loads(args.child))
        print(RESULT_MARK + json.dumps(result), flush=True)
        return
    if not args.roots:
        parser.error("give at least one dataset root")
    which = args.which or (["stream", "map"] + (["lerobot"] if args.peer_python else []))
    if "lerobot" in which and not args.peer_python:
        parser.error("--which lerobot needs --peer_python (an interpreter with lerobot installed)")
    results: list[dict] = []
    for root in args.roots:
        root = root.resolve()
        episodes, frames = dataset_size(root)
        for loader in which:
            python = args.peer_python if loader == "lerobot" else args.python
            cache = Path(tempfile.mkdtemp(prefix=f"startup-{loader}-"))
            try:
                for run in range(max(1, args.runs)):
                    label = "cold" if run == 0 else "warm" if args.runs == 2 else f"warm{run}"
                    if run == 0 and args.evict:
                        evict_page_cache(root)
                    cfg = {
                        "which": loader,
                        "root": str(root),
                        "batches": args.batches,
                        "batch_size": args.batch_size,
                        "num_workers": args.num_workers,
                        "pss": args.pss,
                    }
                    result = {
                        "root": str(root),
                        "episodes": episodes,
                        "which": loader,
                        "run": label,
                        **run_child(python, cfg, child_env(loader, cache), args.timeout),
                    }
                    if result.get("frames") is None:  # an iterable dataset may have no len(): info.json's count
                        result["frames"] = frames
                    results.append(result)
                    status = result.get("error") or (
                        f"construct {result['construct_s']} s, first batch "
                        f"{result['first_batch_s']} s, peak {result['peak_tree_mb']} MB"
                    )
                    print(f"{root.name} {loader} {label}: {status}", file=sys.stderr, flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    table = markdown(results, args.pss)
    print(table)
    if args.out:
        doc = {
            "argv": sys.argv,
            "batches": args.batches,
            "batch_size": args.batch_size,
            "num_workers": args.num_workers,
            "cpus": os.cpu_count(),
            "results": results,
            "markdown": table,
        }
        args.out.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
