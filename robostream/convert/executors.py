"""Who runs the conversion's tasks: a local pool of processes (default), or datatrove's executors (local, SLURM
job arrays, Ray). Every executor runs the same loop (`worker.run_worker`) against the same work dir.

The local pool is our own rather than datatrove's local executor because a multiprocessing pool hangs or dies as a
whole when one worker is killed; here the parent waits on each worker's process sentinel, records a failure for
the task a dead worker held, frees its lease and starts a replacement, so a SIGKILL costs one task attempt.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robostream.convert.manifest import WorkDir
from robostream.convert.worker import ConversionFailed, WorkerOptions, load_plan, run_worker

EXIT_TASK_FAILED = 3
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class EngineOptions:
    """Options of datatrove's SLURM and Ray executors (ignored by the local pool)."""

    tasks: int = 0  # datatrove tasks (workers) to launch; 0: --workers
    partition: str | None = None  # SLURM partition
    time: str = "24:00:00"  # SLURM time limit of each task
    cpus_per_task: int = 2
    mem_per_cpu_gb: float = 2.0
    logging_dir: str | None = None  # datatrove's logs; default <work dir>/datatrove
    sbatch_args: dict[str, Any] = field(default_factory=dict)
    venv_path: str | None = None  # activate script sourced in the SLURM job (path/to/venv/bin/activate)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed `convert` leaves no orphan workers."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker_main(work_dir: str, options: WorkerOptions) -> None:
    _die_with_parent()
    try:
        run_worker(work_dir, options)
    except ConversionFailed as exc:
        print(f"robostream convert: {exc}", file=sys.stderr)
        sys.exit(EXIT_TASK_FAILED)


def _failed_task_message(work: WorkDir, options: WorkerOptions) -> str:
    for task in load_plan(work).tasks:
        failures = work.failures(task.task_id, since=options.since)
        if len(failures) >= options.max_attempts:
            return (f"{task.output}: failed {len(failures)} times; last error ({failures[-1]['owner']}): "
                    f"{failures[-1]['message']}")
    return "a worker reported a failed task, but no task has reached the attempt limit"


def run_local_pool(work_dir: Path, *, workers: int, options: WorkerOptions,
                   on_tick: Callable[[], None] = lambda: None, tick_s: float = 0.5) -> None:
    """Run `workers` worker processes until every task is done; raise ConversionFailed if one cannot be done."""
    work = WorkDir(work_dir, lease_s=options.lease_s)
    task_ids = [t.task_id for t in load_plan(work).tasks]
    context = multiprocessing.get_context("spawn")  # no inherited Arrow/FFmpeg threads or locks
    running: dict[Any, Any] = {}

    def start() -> None:
        process = context.Process(target=_worker_main, args=(str(work_dir), options), name="robostream-convert")
        process.start()
        running[process.sentinel] = process

    def stop_all() -> None:
        for process in running.values():
            process.kill()
        for process in running.values():
            process.join()
        running.clear()

    for _ in range(workers):
        start()
    idle_deaths = 0
    try:
        while running:
            for sentinel in multiprocessing.connection.wait(list(running), timeout=tick_s):
                process = running.pop(sentinel)
                process.join()
                if process.exitcode == 0:
                    continue
                if process.exitcode == EXIT_TASK_FAILED:
                    stop_all()
                    raise ConversionFailed(_failed_task_message(work, options))
                how = (f"killed by {signal.Signals(-process.exitcode).name}" if process.exitcode < 0
                       else f"exit code {process.exitcode}")
                held = work.leases_held_by_pid(socket.gethostname(), process.pid, task_ids)
                for lease in held:
                    work.record_failure(lease.task_id, lease.attempt, lease.owner,
                                        f"worker process {process.pid} died ({how}) while producing this file")
                # A worker that dies holding nothing failed outside any task (start-up, environment): retrying
                # forever would hang the run, so such deaths are bounded like a task's failures.
                idle_deaths = 0 if held else idle_deaths + 1
                if idle_deaths >= options.max_attempts:
                    stop_all()
                    raise ConversionFailed(f"{idle_deaths} worker processes in a row died ({how}) before taking "
                                           "any file; see their output above")
                if not all(work.is_done(t) for t in task_ids):
                    start()
            on_tick()
    except BaseException:
        stop_all()
        raise

