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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robostream.convert.jobs import load_job
from robostream.convert.manifest import WorkDir
from robostream.convert.worker import ConversionFailed, WorkerOptions, run_worker

EXIT_TASK_FAILED = 3
PLAN_POLL_S = 0.02
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class EngineOptions:
    """Options of datatrove's SLURM and Ray executors (ignored by the local pool)."""

    tasks: int = 0  # datatrove tasks (workers) to launch; 0: --workers
    partition: str | None = None  # SLURM partition
    time: str = "24:00:00"  # SLURM time limit of each task
    cpus_per_task: int = 2
    mem_per_cpu_gb: float = 2.0
    logging_dir: str | None = None  # datatrove's logs; default <work dir>.logs beside the work dir (kept at the end)
    sbatch_args: dict[str, Any] = field(default_factory=dict)
    venv_path: str | None = None  # activate script sourced in the SLURM job (path/to/venv/bin/activate)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed `convert` leaves no orphan workers."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker_main(work_dir: str, options: WorkerOptions, wait_for_plan: bool) -> None:
    _die_with_parent()
    if wait_for_plan:  # started while the command plans: importing pyarrow/PyAV overlaps planning
        plan = WorkDir(work_dir).plan_path
        while not plan.exists():
            time.sleep(PLAN_POLL_S)  # the parent kills this process if planning fails (and it dies with the parent)
    try:
        run_worker(work_dir, options)
    except ConversionFailed as exc:
        print(f"robostream convert: {exc}", file=sys.stderr)
        sys.exit(EXIT_TASK_FAILED)


def failed_task_message(work: WorkDir, options: WorkerOptions) -> str | None:
    """What failed the run: the first file that failed `max_attempts` times and its last error; None if none did.

    Args:
        work: the conversion's work dir (its plan and failure records).
        options: the attempt limit, and since when failures count.
    """
    for task in load_job(work).tasks:
        failures = work.failures(task.task_id, since=options.since)
        if len(failures) >= options.max_attempts:
            return (
                f"{task.output}: failed {len(failures)} times; last error ({failures[-1]['owner']}): "
                f"{failures[-1]['message']}"
            )
    return None


class LocalPool:
    """`workers` worker processes on this machine, watched until every task is done.

    `start()` may be called before the plan exists (the workers import their libraries while the command plans,
    then wait for plan.json); `run()` watches them: a worker killed mid-file gets a failure recorded for that file
    and a replacement; a file that fails `max_attempts` times stops all and raises ConversionFailed.
    """

    def __init__(self, work_dir: Path, *, workers: int, options: WorkerOptions) -> None:
        self.work_dir, self.workers, self.options = work_dir, workers, options
        self.context = multiprocessing.get_context("spawn")  # no inherited Arrow/FFmpeg threads or locks
        self.running: dict[Any, Any] = {}

    def _start_one(self) -> None:
        wait_for_plan = not WorkDir(self.work_dir).plan_path.exists()
        process = self.context.Process(
            target=_worker_main, args=(str(self.work_dir), self.options, wait_for_plan), name="robostream-convert"
        )
        process.start()
        self.running[process.sentinel] = process

    def start(self) -> None:
        while len(self.running) < self.workers:
            self._start_one()

    def stop(self) -> None:
        for process in self.running.values():
            process.kill()
        for process in self.running.values():
            process.join()
        self.running.clear()

    def run(self, on_tick: Callable[[], None] = lambda: None, tick_s: float = 0.5) -> None:
        work = WorkDir(self.work_dir, lease_s=self.options.lease_s)
        task_ids = [t.task_id for t in load_job(work).tasks]
        self.start()
        idle_deaths = 0
        try:
            while self.running:
                for sentinel in multiprocessing.connection.wait(list(self.running), timeout=tick_s):
                    process = self.running.pop(sentinel)
                    process.join()
                    if process.exitcode == 0:
                        continue
                    if process.exitcode == EXIT_TASK_FAILED:
                        self.stop()
                        raise ConversionFailed(
                            failed_task_message(work, self.options)
                            or "a worker reported a failed task, but no task has reached the attempt limit"
                        )
                    how = (
                        f"killed by {signal.Signals(-process.exitcode).name}"
                        if process.exitcode < 0
                        else f"exit code {process.exitcode}"
                    )
                    held = work.leases_held_by_pid(socket.gethostname(), process.pid, task_ids)
                    for lease in held:
                        work.record_failure(
                            lease.task_id,
                            lease.attempt,
                            lease.owner,
                            f"worker process {process.pid} died ({how}) while producing this file",
                        )
                    # A worker that dies holding nothing failed outside any task (start-up, environment):
                    # retrying forever would hang the run, so such deaths are bounded like a task's failures.
                    idle_deaths = 0 if held else idle_deaths + 1
                    if idle_deaths >= self.options.max_attempts:
                        self.stop()
                        raise ConversionFailed(
                            f"{idle_deaths} worker processes in a row died ({how}) before "
                            "taking any file; see their output above"
                        )
                    if not all(work.is_done(t) for t in task_ids):
                        self._start_one()
                on_tick()
        except BaseException:
            self.stop()
            raise
