"""One worker of a conversion or transcode (jobs.py): claim a task's lease, produce its file, publish it, repeat until every task is done.

The same loop runs in the local pool's processes, in datatrove tasks on SLURM or Ray, and on any extra machine
pointed at the same work dir; which task runs where is decided only by the leases (see manifest.py).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from robostream.convert.faults import crash_point
from robostream.convert.jobs import Job, load_job
from robostream.convert.manifest import Lease, Owner, WorkDir, failure_text
from robostream.convert.plan import FileTask
from robostream.durable import fsync_dir
from robostream.errors import RobostreamError

POLL_PER_TASK_S = 0.01


class ConversionFailed(RobostreamError):
    """A task failed `max_attempts` times; the message carries its last error."""


@dataclass(frozen=True)
class WorkerOptions:
    lease_s: float = 60.0  # a lease not renewed for this long may be taken over by another worker
    max_attempts: int = 3  # failures of one task (since `since`) that fail the run
    poll_s: float = 1.0  # wait between looks at tasks other workers hold
    since: float = 0.0  # failures recorded before this time (earlier runs) do not count


class Heartbeat:
    """Renews a lease every lease_s / 4 in a thread; `lost` turns True if it was superseded."""

    def __init__(self, work: WorkDir, lease: Lease) -> None:
        self.work, self.lease = work, lease
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.task_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.work.lease_s / 4):
            renewed = self.work.renew(self.lease)
            if renewed is None:
                self.lost = True
                return
            self.lease = renewed

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def publish(work: WorkDir, lease: Lease, task: FileTask, produced: Path, size: int) -> int:
    """Move an attempt's output into the staging dataset (first attempt wins) and mark the task done."""
    final = work.staging / task.output
    final.parent.mkdir(parents=True, exist_ok=True)
    crash_point("task-written")
    try:
        os.link(produced, final)
    except FileExistsError:
        pass  # an earlier attempt published it (outputs are only linked after fsync, so it is whole)
    fsync_dir(final.parent)
    crash_point("task-published")
    final_size = final.stat().st_size
    if final_size != size:
        raise RobostreamError(
            f"{final}: {final_size} bytes already published, this attempt wrote {size}; two "
            "attempts of one task disagree: remove the work dir and start again"
        )
    work.mark_done(lease, final_size)
    crash_point("task-done")
    return final_size


def run_leased_task(work: WorkDir, lease: Lease, task: FileTask, job: Job) -> int | None:
    """Run one leased task of `job`; returns the bytes published, or None when the lease was lost (output dropped)."""
    work.clean_attempts(task.task_id, keep=lease.attempt)
    folder = work.attempt_dir(lease)
    folder.mkdir(parents=True, exist_ok=True)
    heartbeat = Heartbeat(work, lease)
    try:
        produced = folder / Path(task.output).name
        size = job.produce(task, produced)
        if heartbeat.lost or not work.holds(heartbeat.lease):
            return None  # taken over after our lease expired: the new holder publishes
        return publish(work, heartbeat.lease, task, produced, size)
    finally:
        heartbeat.stop()
        work.clean_attempts(task.task_id)


def check_done(work: WorkDir, tasks: list[FileTask]) -> None:
    """Forget done markers whose output is not in staging with the recorded size (it will be redone)."""
    for task in tasks:
        size = work.done_size(task.task_id)
        final = work.staging / task.output
        if size is not None and (not final.is_file() or final.stat().st_size != size):
            work.unmark_done(task.task_id)


def run_worker(work_dir: str | Path, options: WorkerOptions = WorkerOptions()) -> int:
    """Work on the conversion in `work_dir` until every task is done; returns the number of tasks run here.

    Raises ConversionFailed when a task has failed `max_attempts` times (by this or any other worker).
    """
    work = WorkDir(work_dir, lease_s=options.lease_s)
    if not work.plan_path.exists():
        return 0  # finished (and cleaned up) by another process before this worker started
    job = load_job(work)
    # Longest tasks first, so that the last to finish are short and workers end together. A task's time goes with
    # its number of input files (opening and probing each one: ~4-5 ms per episode file, data or video), not with
    # its bytes (a data file is few bytes but as many files as a video file).
    tasks = sorted(job.tasks, key=lambda t: -(t.span.end - t.span.first))
    owner = Owner.current()
    ran = 0
    while True:
        remaining = [t for t in tasks if not work.is_done(t.task_id)]
        if not remaining or not work.plan_path.exists():  # all done, or finished and cleaned up by another process
            return ran
        claimed = False
        for task in remaining:
            failures = work.failures(task.task_id, since=options.since)
            if len(failures) >= options.max_attempts:
                raise ConversionFailed(
                    f"{task.output}: failed {len(failures)} times; last error "
                    f"({failures[-1]['owner']}): {failures[-1]['message']}"
                )
            if work.is_done(task.task_id):
                continue
            lease = work.try_claim(task.task_id, owner)
            if lease is None:
                continue
            claimed = True
            try:
                if run_leased_task(work, lease, task, job) is not None:
                    ran += 1
            except (OSError, RobostreamError, ValueError) as exc:
                # Recorded and retried; after max_attempts the run fails with this message (above).
                work.record_failure(task.task_id, lease.attempt, owner, failure_text(exc))
                work.release(lease)
        if not claimed:
            # Every remaining task is held by a live worker: look again soon. The last few files of a run are
            # polled quickly (a worker that waits a full second for the others costs the run that second).
            time.sleep(min(options.poll_s, POLL_PER_TASK_S * len(remaining)))
