"""The conversion as datatrove pipeline steps, launched by datatrove's executors (local, SLURM, Ray).

Each datatrove task runs the ordinary worker loop against the shared work dir: datatrove ranks are only labels,
which file a task converts is decided by the leases, so a rank that dies (or a node that is preempted) only delays
its files until its leases expire. On SLURM, finalize runs as a one-task job that depends on the files job array.
Needs `pip install datatrove` (and `ray` for the Ray executor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from datatrove.executor import LocalPipelineExecutor, RayPipelineExecutor, SlurmPipelineExecutor
from datatrove.pipeline.base import PipelineStep

from robostream.convert.executors import EngineOptions, failed_task_message
from robostream.convert.finish import finish_conversion
from robostream.convert.jobs import load_job
from robostream.convert.manifest import WorkDir
from robostream.convert.worker import ConversionFailed, WorkerOptions, run_worker


class ConvertFiles(PipelineStep):
    """Produce output files of the conversion in `work_dir` until none is left."""

    name = "convert files"
    type = "robostream"

    def __init__(self, work_dir: str, options: WorkerOptions) -> None:
        super().__init__()
        self.work_dir, self.options = work_dir, options

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        run_worker(self.work_dir, self.options)
        return None


class FinalizeConversion(PipelineStep):
    """Write the metadata and swap the dataset into place (after every file is done)."""

    name = "finalize conversion"
    type = "robostream"

    def __init__(self, src: str, out: str | None, work_dir: str, options: WorkerOptions) -> None:
        super().__init__()
        self.src, self.out, self.work_dir, self.options = src, out, work_dir, options

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        finish_conversion(self.src, out=self.out, work_dir=self.work_dir, options=self.options)
        return None


def _check_files_done(work_dir: Path, options: WorkerOptions, executor: str, logs: str) -> None:
    """Raise ConversionFailed when the executor returned with files left. datatrove's Ray executor only logs a
    failed task and returns; without this, the failure would surface as a bare "files not converted" at finalize."""
    work = WorkDir(work_dir, lease_s=options.lease_s)
    if not work.plan_path.exists():
        return  # finished and cleaned up by another process sharing the work dir
    unfinished = [t.output for t in load_job(work).tasks if not work.is_done(t.task_id)]
    if unfinished:
        raise ConversionFailed(
            failed_task_message(work, options)
            or f"{work_dir}: {len(unfinished)} file(s) not converted (e.g. {unfinished[0]}) when the {executor} "
            f"tasks ended; see their logs in {logs}/files/logs, then rerun the command to resume"
        )


def launch(
    work_dir: Path,
    *,
    executor: Literal["datatrove-local", "slurm", "ray"],
    workers: int,
    options: WorkerOptions,
    engine: EngineOptions,
    src: str,
    out: str | None,
) -> str | None:
    """Run (local, Ray) or submit (SLURM) the conversion; returns the SLURM finalize job id, else None.

    For local and Ray the caller finalizes after this returns; on SLURM the finalize job does.
    """
    tasks = engine.tasks or workers
    logs = engine.logging_dir or str(work_dir.with_name(work_dir.name + ".logs"))
    step = ConvertFiles(str(work_dir), options)
    if executor == "datatrove-local":
        LocalPipelineExecutor(
            pipeline=[step], tasks=tasks, workers=workers, logging_dir=f"{logs}/files", skip_completed=False
        ).run()
        _check_files_done(work_dir, options, executor, logs)
        return None
    if executor == "ray":
        import ray

        connect_here = not ray.is_initialized()
        if connect_here:
            ray.init()  # the running cluster (RAY_ADDRESS, or one started on this machine), else a new local one
        try:
            RayPipelineExecutor(
                pipeline=[step],
                tasks=tasks,
                workers=workers,
                logging_dir=f"{logs}/files",
                cpus_per_task=engine.cpus_per_task,
                mem_per_cpu_gb=engine.mem_per_cpu_gb,
                skip_completed=False,
            ).run()
        finally:
            if connect_here:  # disconnect, stopping the local cluster if ray.init started one; a caller's stays
                ray.shutdown()
        _check_files_done(work_dir, options, executor, logs)
        return None
    if engine.partition is None:
        raise ValueError("--executor slurm needs --partition")
    common = dict(
        time=engine.time,
        partition=engine.partition,
        mem_per_cpu_gb=engine.mem_per_cpu_gb,
        sbatch_args=dict(engine.sbatch_args),
        venv_path=engine.venv_path,
        skip_completed=False,
    )
    files = SlurmPipelineExecutor(
        pipeline=[step],
        tasks=tasks,
        cpus_per_task=engine.cpus_per_task,
        job_name="robostream-convert",
        logging_dir=f"{logs}/files",
        **common,
    )
    final = SlurmPipelineExecutor(
        pipeline=[FinalizeConversion(src, out, str(work_dir), options)],
        tasks=1,
        cpus_per_task=1,
        job_name="robostream-finalize",
        logging_dir=f"{logs}/finalize",
        depends=files,
        **common,
    )
    final.run()
    return str(final.job_id)
