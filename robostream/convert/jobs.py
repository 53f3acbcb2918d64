"""The jobs the file-task engine runs: a v2.1 -> v3.0 conversion, or a v3.0 transcode.

The engine (leases and done markers, the worker loop, the executors, finalize and the journaled swap) is the same
for every job; a job says which output files it makes (one task each), how one is produced, and what finalize
writes beside them into the staging dataset. A work dir's plan.json names its job (`"job"`; absent: a conversion),
so any process pointed at the work dir (a local worker, a datatrove task, the SLURM finalize job) runs the right one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from robostream.convert.file_tasks import check_unchanged, write_data_file, write_video_file
from robostream.convert.finalize import write_metadata
from robostream.convert.manifest import WorkDir, read_json
from robostream.convert.plan import FileTask
from robostream.convert.planning import ConversionPlan
from robostream.convert.transcode_job import TranscodeJob
from robostream.convert.transcode_plan import TRANSCODE
from robostream.errors import RobostreamError
from robostream.format.v21 import V21Layout, read_layout, read_v21


class Job(Protocol):
    """What the engine needs of a job."""

    @property
    def tasks(self) -> list[FileTask]:
        """Every output file, one task each."""
        ...

    def produce(self, task: FileTask, out: Path) -> int:
        """Write `task`'s output file at `out`; returns its size (fsynced)."""
        ...

    def finish_staging(self, work: WorkDir, tmp: Path) -> None:
        """Write the rest of the dataset into `work.staging` once every task is done (`tmp`: scratch files)."""
        ...


class ConversionJob:
    """A v2.1 -> v3.0 conversion (planning.py plans it, file_tasks.py writes its files, finalize.py its metadata)."""

    def __init__(self, plan: ConversionPlan, layout: V21Layout) -> None:
        self.plan, self.layout = plan, layout

    @property
    def tasks(self) -> list[FileTask]:
        return self.plan.tasks

    def task_inputs(self, task: FileTask) -> list[tuple[Path, int]]:
        """(path, size in bytes recorded at planning) of every input file of `task`."""
        episodes = range(task.span.first, task.span.end)
        layout = self.layout
        if task.video_key is None:  # a data file
            return [(layout.path(layout.data_file(e)), int(self.plan.data["bytes"][e])) for e in episodes]
        sizes = self.plan.videos[task.video_key]["bytes"]
        return [(layout.path(layout.video_file(e, task.video_key)), int(sizes[e])) for e in episodes]

    def produce(self, task: FileTask, out: Path) -> int:
        inputs = self.task_inputs(task)
        check_unchanged(inputs)
        paths = [p for p, _ in inputs]
        if task.kind == "data":
            return write_data_file(paths, out, self.layout.image_keys)
        return write_video_file(paths, out)

    def finish_staging(self, work: WorkDir, tmp: Path) -> None:
        plan = self.plan
        write_metadata(work.staging, tmp, read_v21(plan.source), plan, plan.tasks, work.load_episode_stats())


def load_job(work: WorkDir) -> ConversionJob | TranscodeJob:
    """The job planned in `work` (its plan.json says which)."""
    doc = read_json(work.plan_path)
    if doc is not None and doc.get("job") == TRANSCODE:
        return TranscodeJob.load(work.plan_path)
    plan = ConversionPlan.load(work.plan_path) if doc is not None else None
    if plan is None:
        raise RobostreamError(
            f"{work.plan_path}: no plan; start the job with `robostream convert` or `robostream transcode` (each "
            "plans before any worker runs)"
        )
    return ConversionJob(plan, read_layout(plan.source))
