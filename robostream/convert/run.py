"""The conversion's orchestration: check the arguments, plan (or resume the work dir's plan), run the file tasks
on the chosen executor, then finalize. See `convert()`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from robostream.convert.executors import EngineOptions, LocalPool
from robostream.convert.finish import Targets, claim_targets, complete_swap, finalize_or_wait, finished_conversion
from robostream.convert.manifest import WorkDir
from robostream.convert.plan import FileTask
from robostream.convert.planning import ConversionPlan, fingerprint, make_plan, preflight_report
from robostream.convert.progress import Progress
from robostream.convert.workdir import remove_work_dir
from robostream.convert.worker import WorkerOptions, check_done
from robostream.errors import RobostreamError
from robostream.numbers import finite_number

LEROBOT_VERSION = "0.6.1"  # the release whose converter output we match


def _plan(targets: Targets, data_mb: float, video_mb: float, workers: int, log) -> ConversionPlan:
    """Load the work dir's plan (same input and options only), or preflight and plan now."""
    plan = ConversionPlan.load(targets.work / "plan.json")
    if plan is not None:
        if plan.source != str(targets.root.resolve()) or plan.fingerprint != fingerprint(
            targets.root, data_mb, video_mb
        ):
            raise RobostreamError(
                f"{targets.work}: holds another conversion ({plan.source}, data {plan.data_limit_mb} "
                f"MB, video {plan.video_limit_mb} MB) or its input changed; remove it or choose "
                "another --work-dir"
            )
        log(f"resuming the conversion planned in {targets.work}")
        return plan
    dataset, plan, stats = make_plan(targets.root, data_limit_mb=data_mb, video_limit_mb=video_mb, workers=workers)
    log("preflight: " + json.dumps(preflight_report(dataset, plan)))
    work = WorkDir(targets.work)
    try:
        work.save_episode_stats(stats)  # before plan.json: a plan on disk always has its stats beside it
        plan.save(work.plan_path)
    except OSError as exc:
        raise RobostreamError(
            f"{targets.work}: cannot write the plan ({exc}); free space there or choose another "
            "--work-dir on the output's filesystem"
        ) from exc
    return plan


EXECUTORS = ("local", "datatrove-local", "slurm", "ray")


def check_engine_arguments(*, workers: Any, executor: Any, lease_s: Any, max_attempts: Any) -> None:
    """Refuse, before anything is read or written, engine arguments that would fail late (0 workers would wait for
    nobody)."""
    finite_number(workers, what="workers", integer=True, minimum=1)
    finite_number(max_attempts, what="max_attempts", integer=True, minimum=1)
    finite_number(lease_s, what="lease_s", positive=True)
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r}: expected one of {EXECUTORS}")


def _check_arguments(
    *,
    workers: Any,
    executor: Any,
    data_file_size_in_mb: Any,
    video_file_size_in_mb: Any,
    lease_s: Any,
    max_attempts: Any,
) -> None:
    """`check_engine_arguments`, and the size limits (a NaN or infinite one would land in info.json)."""
    check_engine_arguments(workers=workers, executor=executor, lease_s=lease_s, max_attempts=max_attempts)
    finite_number(data_file_size_in_mb, what="data_file_size_in_mb", positive=True)
    finite_number(video_file_size_in_mb, what="video_file_size_in_mb", positive=True)


def convert(
    src: str | Path,
    *,
    out: str | Path | None = None,
    work_dir: str | Path | None = None,
    workers: int = 1,
    executor: Literal["local", "datatrove-local", "slurm", "ray"] = "local",
    data_file_size_in_mb: float = 100,
    video_file_size_in_mb: float = 200,
    engine: EngineOptions = EngineOptions(),
    lease_s: float = 60.0,
    max_attempts: int = 3,
    dry_run: bool = False,
    log=print,
) -> dict[str, Any]:
    """Convert the LeRobot v2.1 dataset at `src` to v3.0, producing what lerobot 0.6.1's converter produces.

    Args:
        src: the v2.1 dataset folder (meta/, data/, videos/).
        out: write the v3.0 dataset here (must not exist, unless it holds a finished conversion of `src`: then
            nothing is done, as for a command that joined a conversion others finished); None converts in place:
            `src` becomes v3.0 and the input is kept as `<src>_old`, like lerobot.
        work_dir: plan, leases and the dataset being built; default beside the output. Must be on the output's
            filesystem. Rerunning the same command with the same work dir resumes after any interruption.
        workers: processes (local) or datatrove tasks (other executors) converting files in parallel.
        executor: "local" (a process pool here), or datatrove's "datatrove-local", "slurm" (a job array, then a
            dependent finalize job) or "ray". Other machines may join any run with the same command and work dir.
        data_file_size_in_mb / video_file_size_in_mb: lerobot's file size limits (defaults 100 and 200).
        engine: datatrove executor options (partition, time, cpus per task, ...).
        lease_s: how long a task's lease lives without a heartbeat before another worker may take it over.
        max_attempts: failures of one file (since this call) that fail the conversion.
        dry_run: preflight and plan only; print the report, write nothing but the plan.
        log: where progress lines go.
    Returns:
        A summary (episodes, files, bytes written, seconds, ...), also printed by the CLI as JSON.
    """
    started = time.time()
    _check_arguments(
        workers=workers,
        executor=executor,
        data_file_size_in_mb=data_file_size_in_mb,
        video_file_size_in_mb=video_file_size_in_mb,
        lease_s=lease_s,
        max_attempts=max_attempts,
    )
    finished = finished_conversion(src, out, work_dir)
    if finished is not None:
        log(
            f"{finished}: already holds the v3.0 conversion of {src} (its episodes, frames and fps), and no "
            "conversion of it is under way: nothing to do"
        )
        return {"output": str(finished), "already_converted": True, "seconds": round(time.time() - started, 3)}
    summary, plan = run_job(
        src,
        out,
        work_dir,
        lambda targets: _plan(targets, data_file_size_in_mb, video_file_size_in_mb, workers, log),
        workers=workers,
        executor=executor,
        engine=engine,
        options=WorkerOptions(lease_s=lease_s, max_attempts=max_attempts, since=started),
        dry_run=dry_run,
        command="convert",
        log=log,
    )
    if plan is None or "files_resumed" not in summary:  # not finished here (see run_job)
        return summary
    return {
        "output": summary.pop("output"),
        "input_kept": None if out is not None else str(Path(src).absolute()) + "_old",
        "episodes": plan.episodes,
        "frames": int(plan.data["rows"].sum()),
        **summary,
        "lerobot_version_matched": LEROBOT_VERSION,
    }


class Planned(Protocol):
    """A job's plan, as the engine sees it."""

    @property
    def tasks(self) -> list[FileTask]: ...


P = TypeVar("P", bound=Planned)


def run_job(
    src: str | Path,
    out: str | Path | None,
    work_dir: str | Path | None,
    plan_job: Callable[[Targets], P],
    *,
    workers: int,
    executor: Literal["local", "datatrove-local", "slurm", "ray"],
    engine: EngineOptions,
    options: WorkerOptions,
    dry_run: bool,
    command: Literal["convert", "transcode"],
    log: Callable[[str], None],
) -> tuple[dict[str, Any], P | None]:
    """Claim the work dir, plan a job (or resume the work dir's plan), run its file tasks on the executor, then
    finalize: the engine `convert()` and `transcode()` share (the job itself is named in the plan: jobs.py).

    Args:
        src, out, work_dir: the input, the output (None: in place) and the work dir (None: beside the output).
        plan_job: loads the work dir's plan (the same job only) or plans and saves it; returns the plan.
        workers: processes (local) or datatrove tasks.
        executor: "local" (a process pool here), "datatrove-local", "slurm" or "ray".
        engine: datatrove executor options.
        options: leases, attempts, and since when failures count (`options.since`: the command's start).
        dry_run: plan only.
        command: what the progress lines say is running.
        log: where progress lines go.
    Returns:
        The summary, with "files_resumed" when the job finished here (else: a swap completed, a dry run's plan, a
        SLURM submission or "finished_by_another_process"), and the plan (None when only a swap was completed).
    """
    started = options.since
    targets = claim_targets(src, out, work_dir)
    if targets.journal.exists():  # a crash during the swap: complete it
        complete_swap(targets)
        return {"output": str(targets.destination), "resumed": "swap", "seconds": round(time.time() - started, 3)}, None
    pool = LocalPool(targets.work, workers=workers, options=options) if executor == "local" and not dry_run else None
    fresh = not (targets.work / "plan.json").exists()
    if pool is not None and fresh:
        pool.start()  # the workers import their libraries while this process plans (resuming: after the count)
    try:
        plan = plan_job(targets)
    except BaseException:
        if pool is not None:
            pool.stop()
        if fresh:  # a refused input leaves nothing behind: the work dir holds only what planning began
            remove_work_dir(targets.work)
        raise
    planned = time.time()
    tasks = plan.tasks
    if dry_run:
        return {"output": None, "plan": str(targets.work / "plan.json"), "files": len(tasks)}, plan
    work = WorkDir(targets.work, lease_s=options.lease_s)
    if not fresh:
        check_done(work, tasks)
    already = 0 if fresh else sum(work.is_done(t.task_id) for t in tasks)
    progress = Progress(work, tasks, command=command, log=log)
    if executor == "local":
        assert pool is not None  # made above for every local run but a dry run (returned above)
        pool.run(on_tick=progress.tick)
    else:  # datatrove is optional (the `distributed` extra): imported only for its executors
        from robostream.convert.datatrove_steps import launch

        job = launch(
            targets.work,
            executor=executor,
            workers=workers,
            options=options,
            engine=engine,
            src=str(targets.root),
            out=None if targets.out is None else str(targets.out),
        )
        if job is not None:
            progress.close()
            return {
                "output": str(targets.destination),
                "submitted": job,
                "files": len(tasks),
                "note": "SLURM runs the files and then the finalize job; rerun this command to follow or resume",
            }, plan
    progress.close()
    written = sum(work.done_size(t.task_id) or 0 for t in tasks)
    done = time.time()
    if not finalize_or_wait(targets, options):
        return {
            "output": str(targets.destination),
            "finished_by_another_process": True,
            "seconds": round(time.time() - started, 3),
        }, plan
    return {
        "output": str(targets.destination),
        "files": len(tasks),
        "files_resumed": already,
        "bytes_written": written,
        "workers": workers,
        "executor": executor,
        "seconds": round(time.time() - started, 3),
        "seconds_plan": round(planned - started, 3),
        "seconds_files": round(done - planned, 3),
        "seconds_finalize": round(time.time() - done, 3),
    }, plan
