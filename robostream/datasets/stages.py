"""The stages of a consumer's read path, and how busy each was and how long the consumer waited on it.

A streaming consumer's pipeline (what SPDL's pipeline reports per stage, here per DataLoader worker):

- `fetch`: remote bytes; its tasks are the storage's range requests, its busy time their summed durations, its
  threads the read-ahead's requests allowed at once, and its wait the readers' wait for blocks (`read_wait_us`,
  counted by the storage over the threads that read: decoders and row reads, several at once, so it may exceed the
  loop's own time).
- `rows`: an episode's data rows (in the row pool ahead of their pieces for remote data, else in the loop).
- `index`: a camera file's packet index (remote data, the index pool or the loop).
- `decode`: one decoder call over a camera file's frames for several pieces (decode pool or the loop).
- `assemble`: a batch (or a sample) written into its tensors.

Per stage: tasks, busy time (the sum of its tasks' durations, whatever thread ran them) and wait (the time the
consumer's loop spent until the stage's result was there: blocked on a future, or doing the task itself when the
stage runs in the loop). With the loop's own wall time (`worker_wall_us`) and the stage's threads, the benchmark
computes occupancy = busy / (wall x threads) where it reports (bench/metrics.py), not here.

Timed per task (a row read, a decoder call, a batch), never per frame: two perf_counter_ns calls and a few list
updates under an uncontended lock. Running totals are kept per process (`StageTimes`, added to from any thread) and
the consumer's loop adds what is new to its worker's row of the shared counters (`Reading.count_stages`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, ParamSpec, TypeVar, get_args

from robostream.process_local import ProcessLocal

Stage = Literal["fetch", "rows", "index", "decode", "assemble"]
STAGES: tuple[Stage, ...] = get_args(Stage)  # in pipeline order
TIMED: tuple[Stage, ...] = ("rows", "index", "decode", "assemble")  # timed here; fetch's figures come from storage
FIGURES = ("tasks", "busy_us", "wait_us")  # summed over workers
# per timed stage, the names of its counters of FIGURES (named once, not per publish)
FIGURE_FIELDS = tuple(tuple(f"{stage}_{figure}" for figure in FIGURES) for stage in TIMED)
STAGE_FIELDS = (
    *(name for names in FIGURE_FIELDS for name in names),
    "fetch_tasks",  # the storage's range requests (its wait is read_wait_us)
    "fetch_busy_us",  # their durations summed
    "worker_wall_us",  # the consumers' loops' own time (summed): occupancy's denominator
)
TIMED_THREAD_FIELDS = tuple(f"{stage}_threads" for stage in TIMED)  # the most threads a worker ran a stage on
THREAD_FIELDS = ("fetch_threads", *TIMED_THREAD_FIELDS)  # fetch: the read-ahead's requests allowed at once
_ROW = {stage: row for row, stage in enumerate(TIMED)}

P = ParamSpec("P")
T = TypeVar("T")


class StageTimes:
    """One process's running totals per timed stage (tasks, busy ns, wait ns, threads) and its loop's wall time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # pool threads add their tasks while the loop adds its waits
        self.totals = [[0, 0, 0] for _ in TIMED]  # per stage: tasks, busy ns, wait ns
        self.threads = [0 for _ in TIMED]  # per stage: the most threads it ran on
        self.wall_ns = 0
        self.published = [[0, 0, 0] for _ in TIMED]  # what the loop already added to the shared counters
        self.published_wall_ns = 0

    def task(self, stage: Stage, busy_ns: int) -> None:
        """A task of `stage` ran (in any thread) for `busy_ns`."""
        with self._lock:
            totals = self.totals[_ROW[stage]]
            totals[0] += 1
            totals[1] += busy_ns

    def wait(self, stage: Stage, wait_ns: int, *, threads: int) -> None:
        """The loop waited `wait_ns` for a result of `stage`, which ran on `threads` threads."""
        with self._lock:
            row = _ROW[stage]
            self.totals[row][2] += wait_ns
            if threads > self.threads[row]:
                self.threads[row] = threads

    def work(self, stage: Stage, busy_ns: int) -> None:
        """The loop ran a task of `stage` itself: busy and waited for the same time, on one thread."""
        self.task(stage, busy_ns)
        self.wait(stage, busy_ns, threads=1)

    def wall(self, elapsed_ns: int) -> None:
        """The loop spent `elapsed_ns` producing samples (from the consumer's loop only)."""
        self.wall_ns += elapsed_ns

    def unpublished(self) -> tuple[list[tuple[int, int, int]], int, list[int]]:
        """What accrued since the last call, per stage (tasks, busy us, wait us), the wall us, and the threads
        (microseconds of the running totals: no rounding adds up over many calls)."""
        with self._lock:
            new = [
                (tasks - tasks_before, busy // 1000 - busy_before // 1000, wait // 1000 - wait_before // 1000)
                for (tasks, busy, wait), (tasks_before, busy_before, wait_before) in zip(self.totals, self.published)
            ]
            self.published = [list(t) for t in self.totals]
            wall = self.wall_ns // 1000 - self.published_wall_ns // 1000
            self.published_wall_ns = self.wall_ns
            return new, wall, list(self.threads)


class StagePool(ThreadPoolExecutor):
    """A thread pool whose every task counts as a task of one stage (its duration as the stage's busy time)."""

    def __init__(self, threads: int, *, stage: Stage, times: ProcessLocal[StageTimes]) -> None:
        """
        Args:
            threads: the pool's threads.
            stage: the stage its tasks belong to (also names its threads).
            times: the process's stage totals.
        """
        super().__init__(threads, thread_name_prefix=f"robostream-{stage}")
        self.threads = threads
        self.stage = stage
        self._times = times

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(self._timed, fn, *args, **kwargs)

    def _timed(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        started = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._times.get().task(self.stage, time.perf_counter_ns() - started)
