"""v2.1 -> v3.0 conversion: lerobot 0.6.1's converter against `robostream convert` with N workers, in one run,
interleaved (Linux: /proc I/O counters, waitid). Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/convert_bench.py /work/bench/v21 --generate --rounds 3 \
        --out convert_bench.json

(`--generate` writes the v2.1 input first with robostream's synth: 200 episodes x 3 cameras of 96x128, ~60 frames;
without it ROOT must be an existing v2.1 dataset.) Every round converts, for each system in turn (the order rotates
between rounds), a FRESH copy of ROOT made just before the run, in a fresh subprocess:
  * lerobot:  `LEROBOT_PYTHON tests/compat/lerobot_convert.py COPY` (in place, offline, a fresh private HF_HOME);
  * ours-wN:  `python -m robostream.cli convert COPY --out OUT --workers N` (N from --workers, default 1 and 2);
with the same --data-mb / --video-mb limits (lerobot's defaults, 100 and 200). Before each run the copy is flushed to
disk (os.sync) so its write-back does not land in the measured run; the copy's files are then in the page cache
for every system alike (warm reads). Per run it measures:
  * wall_s: from spawning the subprocess to its exit (interpreter start and imports included); inner_s: the
    converter's own timing, as the subprocess reports it;
  * sync_s: os.sync() right after the exit (write-back of what the run left dirty; not part of wall_s);
  * peak_rss_bytes: the peak, over samples every --poll-s (default 50 ms), of the RSS summed over the subprocess
    and all its live descendants (pages shared between forked workers count once per process);
    max_single_rss_bytes: the largest single process's peak RSS (getrusage ru_maxrss of the reaped tree, exact);
  * write_bytes / write_chars / read_bytes: the tree's /proc/<pid>/io counters (psutil io_counters), read from the
    subprocess once it has exited but before it is reaped, when they include every descendant it reaped (a
    process that escapes its parent is not counted). write_bytes is what the tree caused to be written to storage
    (dirtied page-cache pages of a disk-backed filesystem; 0 on tmpfs), write_chars what it passed to write();
  * output_bytes / output_files: the sizes of the files of the converted dataset; written_over_output =
    write_bytes / output_bytes (1.0: every byte written once; temporary copies and caches raise it);
  * equal_to_lerobot: `compare_datasets(ours, lerobot's output of the same round) == []` (logical equality:
    file set, parquet schemas and values, mp4 packets, JSON).
Prints a markdown table of the medians over rounds (wall s, converter s = inner_s) with ratios against lerobot and
writes everything (per run and medians) to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from robostream.convert.compare import compare_datasets
from robostream.synth import SynthConfig, generate
from tests.lerobot_env import ENV_VAR, offline_env

REPO = Path(__file__).resolve().parent.parent
LEROBOT_SCRIPT = REPO / "tests" / "compat" / "lerobot_convert.py"
LEROBOT = "lerobot"
MB = 1024 * 1024


class TreeSampler(threading.Thread):
    """Peak RSS summed over a process and its live descendants, sampled every `interval` seconds."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.proc, self.interval = psutil.Process(pid), interval
        self.peak_rss = self.samples = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        try:
            tree = [self.proc, *self.proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return
        rss = 0
        for proc in tree:
            try:
                rss += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):  # exited between listing and reading
                continue
        self.peak_rss, self.samples = max(self.peak_rss, rss), self.samples + 1

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def tree_size(root: Path) -> tuple[int, int]:
    """(bytes, files) of the regular files under root."""
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return sum(sizes), len(sizes)


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding path (write_bytes counts nothing on tmpfs)."""
    path = path.resolve()
    mounts = [p for p in psutil.disk_partitions(all=True) if path.is_relative_to(p.mountpoint)]
    return max(mounts, key=lambda p: len(p.mountpoint)).fstype if mounts else "?"


def measure(args: list[str], env: dict[str, str], log_dir: Path, poll_s: float) -> dict[str, Any]:
    """Run `args` to completion and measure it (see the module docstring); a failure raises with its stderr."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stdout", "w") as out, open(log_dir / "stderr", "w") as err:
        start = time.perf_counter()
        popen = subprocess.Popen(args, stdout=out, stderr=err, env=env, cwd=REPO)
        sampler = TreeSampler(popen.pid, poll_s)
        sampler.start()
        os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its /proc entry remains
        wall_s = time.perf_counter() - start
        sampler.stop()
        io = psutil.Process(popen.pid).io_counters()
        _, status, usage = os.wait4(popen.pid, 0)
        popen.returncode = os.waitstatus_to_exitcode(status)
    sync_start = time.perf_counter()
    os.sync()
    sync_s = time.perf_counter() - sync_start
    stdout = (log_dir / "stdout").read_text()
    if popen.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({popen.returncode}); logs in {log_dir}:\n"
            f"{(log_dir / 'stderr').read_text()[-3000:]}"
        )
    report = json.loads(stdout.strip().splitlines()[-1])  # both commands end with a json line
    return {
        "wall_s": wall_s,
        "inner_s": report["seconds"],
        "sync_s": sync_s,
        "peak_rss_bytes": sampler.peak_rss,
        "rss_samples": sampler.samples,
        "max_single_rss_bytes": usage.ru_maxrss * 1024,
        "write_bytes": io.write_bytes,
        "write_chars": io.write_chars,
        "read_bytes": io.read_bytes,
    }


def run_system(system: str, source: Path, run_dir: Path, opts: argparse.Namespace) -> tuple[dict[str, Any], Path]:
    """Convert a fresh copy of source with `system`; (measurements, the converted dataset)."""
    copy = Path(shutil.copytree(source, run_dir / "ds"))
    os.sync()
    if system == LEROBOT:
        hf_home = run_dir / "hf_home"
        args = [
            opts.lerobot_python,
            str(LEROBOT_SCRIPT),
            str(copy),
            "--data-mb",
            str(opts.data_mb),
            "--video-mb",
            str(opts.video_mb),
            "--hf-home",
            str(hf_home),
        ]
        result, output = measure(args, offline_env(hf_home), run_dir / "logs", opts.poll_s), copy
    else:
        output = run_dir / "out"
        args = [
            sys.executable,
            "-m",
            "robostream.cli",
            "convert",
            str(copy),
            "--out",
            str(output),
            "--workers",
            system.removeprefix("ours-w"),
            "--data-file-size-in-mb",
            str(opts.data_mb),
            "--video-file-size-in-mb",
            str(opts.video_mb),
        ]
        result = measure(args, dict(os.environ), run_dir / "logs", opts.poll_s)
    result["output_bytes"], result["output_files"] = tree_size(output)
    result["written_over_output"] = result["write_bytes"] / result["output_bytes"]
    return result, output


def summarize(runs: list[dict[str, Any]], systems: list[str]) -> dict[str, dict[str, Any]]:
    """Medians per system over rounds, and their ratios to lerobot's medians."""
    keys = (
        "wall_s",
        "inner_s",
        "sync_s",
        "peak_rss_bytes",
        "max_single_rss_bytes",
        "write_bytes",
        "output_bytes",
        "written_over_output",
    )
    summary = {s: {k: statistics.median(r[k] for r in runs if r["system"] == s) for k in keys} for s in systems}
    base = summary[LEROBOT]
    for s in systems:
        mine = [r for r in runs if r["system"] == s]
        summary[s].update(
            rounds=len(mine),
            speedup_vs_lerobot=base["wall_s"] / summary[s]["wall_s"],
            rss_vs_lerobot=summary[s]["peak_rss_bytes"] / base["peak_rss_bytes"],
            written_vs_lerobot=(summary[s]["write_bytes"] / base["write_bytes"] if base["write_bytes"] else None),
            equal_to_lerobot=(None if s == LEROBOT else all(r["equal_to_lerobot"] for r in mine)),
        )
    return summary


def markdown(summary: dict[str, dict[str, Any]]) -> str:
    def ratio(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}x"

    lines = [
        "| system | rounds | wall s | speed-up vs lerobot | converter s | peak tree RSS MB | RSS vs lerobot | "
        "written MB | written vs lerobot | output MB | written / output | equal to lerobot |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system, s in summary.items():
        equal = "(reference)" if s["equal_to_lerobot"] is None else ("yes" if s["equal_to_lerobot"] else "**NO**")
        lines.append(
            f"| {system} | {s['rounds']} | {s['wall_s']:.2f} | {ratio(s['speedup_vs_lerobot'])} | "
            f"{s['inner_s']:.2f} | {s['peak_rss_bytes'] / MB:.0f} | {ratio(s['rss_vs_lerobot'])} | "
            f"{s['write_bytes'] / MB:.1f} | "
            f"{ratio(s['written_vs_lerobot'])} | {s['output_bytes'] / MB:.1f} | "
            f"{s['written_over_output']:.2f} | {equal} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the v2.1 dataset (written there first with --generate)")
    parser.add_argument("--generate", action="store_true", help="write ROOT with robostream's synth (must not exist)")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--episode-length", type=int, default=60)
    parser.add_argument(
        "--lerobot-python",
        default=os.environ.get(ENV_VAR, "/work/lerovenv/bin/python"),
        help=f"interpreter with lerobot 0.6.1 (default: ${ENV_VAR}, else /work/lerovenv/bin/python)",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="robostream worker counts to run")
    parser.add_argument("--data-mb", type=float, default=100.0, help="data_file_size_in_mb (lerobot's default)")
    parser.add_argument("--video-mb", type=float, default=200.0, help="video_file_size_in_mb (lerobot's default)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (every system once per round)")
    parser.add_argument("--poll-s", type=float, default=0.05, help="RSS sampling interval")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the copies and outputs go (default: a temporary folder beside ROOT)",
    )
    parser.add_argument("--keep", action="store_true", help="keep every copy and output (default: removed)")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    opts = parser.parse_args()

    if not (hasattr(os, "waitid") and hasattr(psutil.Process, "io_counters")):
        raise SystemExit("this benchmark needs Linux (os.waitid and /proc/<pid>/io)")
    root: Path = opts.root.absolute()
    config = None
    if opts.generate:
        config = SynthConfig(
            episodes=opts.episodes,
            cameras=opts.cameras,
            height=opts.height,
            width=opts.width,
            episode_length=opts.episode_length,
            codebase_version="v2.1",
        )
        started = time.perf_counter()
        generate(root, config)
        print(f"generated {root} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    info = json.loads((root / "meta" / "info.json").read_text())
    if info["codebase_version"] != "v2.1":
        raise SystemExit(f"{root}: codebase_version {info['codebase_version']}, not v2.1")
    systems = [LEROBOT, *(f"ours-w{n}" for n in opts.workers)]
    work = (
        opts.work_dir.absolute()
        if opts.work_dir is not None
        else Path(tempfile.mkdtemp(prefix=".convert-bench-", dir=root.parent))
    )
    work.mkdir(parents=True, exist_ok=True)
    fs_type = filesystem_type(work)
    if fs_type in ("tmpfs", "ramfs"):
        print(f"warning: {work} is on {fs_type}: write_bytes will read 0 (use --work-dir on a disk)", file=sys.stderr)
    runs: list[dict[str, Any]] = []
    for round_index in range(opts.rounds):
        order = systems[round_index % len(systems) :] + systems[: round_index % len(systems)]
        outputs: dict[str, Path] = {}
        for system in order:
            result, outputs[system] = run_system(system, root, work / f"round{round_index}" / system, opts)
            runs.append({"round": round_index, "system": system, **result})
            print(
                f"round {round_index} {system}: {result['wall_s']:.2f}s, peak RSS "
                f"{result['peak_rss_bytes'] / MB:.0f} MB, wrote {result['write_bytes'] / MB:.1f} MB for "
                f"{result['output_bytes'] / MB:.1f} MB",
                file=sys.stderr,
            )
        for run in runs[-len(order) :]:
            if run["system"] != LEROBOT:
                problems = compare_datasets(outputs[run["system"]], outputs[LEROBOT])
                run["equal_to_lerobot"], run["problems"] = not problems, problems[:20]
        if not opts.keep:
            shutil.rmtree(work / f"round{round_index}")
    if not opts.keep and opts.work_dir is None:
        shutil.rmtree(work)
    summary = summarize(runs, systems)
    table = markdown(summary)
    print(table)
    source_bytes, source_files = tree_size(root)
    results = {
        "dataset": {
            "root": str(root),
            "bytes": source_bytes,
            "files": source_files,
            "episodes": info["total_episodes"],
            "frames": info["total_frames"],
            "synth_config": asdict(config) if config else None,
        },
        "options": {
            "data_mb": opts.data_mb,
            "video_mb": opts.video_mb,
            "rounds": opts.rounds,
            "workers": opts.workers,
            "poll_s": opts.poll_s,
            "lerobot_python": opts.lerobot_python,
        },
        "io_accounting": {
            "write_bytes_meaningful": fs_type not in ("tmpfs", "ramfs"),
            "filesystem": fs_type,
            "note": "write_bytes counts dirtied page-cache pages of disk-backed filesystems "
            "(0 on tmpfs); descendants are included once reaped by their parent",
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "runs": runs,
        "summary": summary,
        "table": table,
    }
    if opts.out is not None:
        opts.out.write_text(json.dumps(results, indent=2))
        print(f"wrote {opts.out}", file=sys.stderr)
    if not all(r.get("equal_to_lerobot", True) for r in runs):
        sys.exit("robostream's output differs from lerobot's (see problems in the runs)")


if __name__ == "__main__":
    main()
