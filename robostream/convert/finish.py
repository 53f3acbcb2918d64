"""The end of a conversion: where it writes (input, output, work dir, checked before anything is written), and
the finalize step (metadata, then the journaled swap into place) that one process runs under a lease.

Both `convert()` and the SLURM finalize job (datatrove_steps) call into here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robostream.convert.finalize import is_v30, swap
from robostream.convert.jobs import load_job
from robostream.convert.manifest import Owner, WorkDir, read_json
from robostream.convert.workdir import JOURNAL, claim_work_dir, holds_conversion, remove_work_dir
from robostream.convert.worker import Heartbeat, WorkerOptions
from robostream.errors import RobostreamError
from robostream.format.v21 import read_info_v21

FINALIZE = "finalize"  # the lease name of the finalize step


@dataclass(frozen=True)
class Targets:
    root: Path  # the v2.1 input
    out: Path | None  # None: in place
    work: Path

    @property
    def destination(self) -> Path:
        return self.out if self.out is not None else self.root

    @property
    def journal(self) -> Path:
        return self.work / JOURNAL


def finished_output(
    out: str | Path, work_dir: str | Path | None, *, matches: Callable[[dict[str, Any]], bool]
) -> Path | None:
    """`out` when it already holds a finished job's result: a v3.0 dataset whose info.json `matches` what the
    command asks for, and no job of it under way (what a command started after the others sharing its work dir
    finished finds: a late task of a SLURM array, a rerun). None otherwise.

    Args:
        out: the output folder.
        work_dir: the work dir; None: beside the output.
        matches: whether the output's info.json is what this command would make.
    """
    out = Path(out).absolute()
    work = Path(work_dir).absolute() if work_dir is not None else out.parent / f".{out.name}.robostream-convert"
    if holds_conversion(work) or not is_v30(out):
        return None
    made = read_json(out / "meta" / "info.json")
    return out if isinstance(made, dict) and matches(made) else None


def finished_conversion(root: str | Path, out: str | Path | None, work_dir: str | Path | None) -> Path | None:
    """`out` when it already holds a finished conversion of `root` (`finished_output`: a v3.0 dataset with the
    input's episodes, frames and fps). None otherwise, and for an in-place conversion.

    Args:
        root: the v2.1 input.
        out: the v3.0 output (None: an in-place conversion, not recognised here).
        work_dir: the work dir; None: beside the output.
    """
    if out is None:
        return None

    def same_counts(made: dict[str, Any]) -> bool:
        given = read_info_v21(Path(root).absolute())
        return all(made.get(key) == given.get(key) for key in ("total_episodes", "total_frames", "fps"))

    return finished_output(out, work_dir, matches=same_counts)


def claim_targets(root: str | Path, out: str | Path | None, work_dir: str | Path | None) -> Targets:
    """Check where a conversion reads and writes, and claim its work dir.

    Args:
        root: the v2.1 input.
        out: the v3.0 output (must not exist), or None to convert in place (the input is kept as `<root>_old`).
        work_dir: the work dir; None puts it beside the output.
    """
    root = Path(root).absolute()
    out = Path(out).absolute() if out is not None else None
    destination = out if out is not None else root
    work = (
        Path(work_dir).absolute()
        if work_dir is not None
        else destination.parent / f".{destination.name}.robostream-convert"
    )
    if out is not None and out.exists() and not (work / JOURNAL).exists():
        raise FileExistsError(f"{out}: already exists; --out must name a folder that does not exist yet")
    old = root.with_name(f"{root.name}_old")
    if out is None and old.exists() and not (work / JOURNAL).exists():
        raise FileExistsError(
            f"{old}: exists; an in-place conversion keeps the input there. Move it away, or write "
            "the result elsewhere with --out DIR"
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    work.parent.mkdir(parents=True, exist_ok=True)
    if os.stat(work.parent).st_dev != os.stat(destination.parent).st_dev:
        raise RobostreamError(
            f"--work-dir {work} is on another filesystem than {destination}; the finished dataset "
            "is moved into place with one rename, which only works within a filesystem. Put the "
            "work dir beside the output (the default)"
        )
    protected = (
        {"the input": root, "the output": destination}
        if out is not None
        else {"the input (converted in place)": root, "the folder the input is kept in": old}
    )
    claim_work_dir(work, protected=protected)
    return Targets(root, out, work)


def _finalize(targets: Targets, options: WorkerOptions) -> bool:
    """Write the metadata and swap, under the finalize lease; False if another process is finalizing."""
    work = WorkDir(targets.work, lease_s=options.lease_s)
    if not work.plan_path.exists():
        return False  # finished and cleaned up by another process a moment ago
    job = load_job(work)
    unfinished = [t.output for t in job.tasks if not work.is_done(t.task_id)]
    if unfinished:
        raise RobostreamError(
            f"{targets.work}: {len(unfinished)} file(s) not converted yet (e.g. {unfinished[0]}); "
            "run the conversion again to finish them"
        )
    lease = work.try_claim(FINALIZE, Owner.current())
    if lease is None:
        return False
    heartbeat = Heartbeat(work, lease)  # finalize of 100k episodes takes a minute: keep others from taking over
    try:
        job.finish_staging(work, targets.work / "tmp")
        if heartbeat.lost:
            raise RobostreamError(
                f"{targets.work}: lost the finalize lease (stalled longer than the lease?); another process finalizes"
            )
        swap(targets.journal, work.staging, targets.root, out=targets.out)
    finally:
        heartbeat.stop()
    remove_work_dir(targets.work)
    return True


def finalize_or_wait(targets: Targets, options: WorkerOptions) -> bool:
    """Finalize here (True), or, when another process sharing the work dir holds the finalize lease, wait until it
    has finished (False); a finalizer that dies is taken over when its lease lapses.

    Args:
        targets: the conversion's input, output and work dir.
        options: the lease length and the poll interval.
    """
    while True:
        if not holds_conversion(targets.work) and is_v30(targets.destination):
            return False
        if _finalize(targets, options):
            return True
        time.sleep(options.poll_s)


def complete_swap(targets: Targets) -> None:
    """Finish a swap a crash interrupted (its journal exists), and remove the work dir."""
    swap(targets.journal, targets.work / "staging", targets.root, out=targets.out)
    remove_work_dir(targets.work)


def finish_conversion(
    src: str | Path, *, out: str | Path | None, work_dir: str | Path | None, options: WorkerOptions
) -> None:
    """Finalize a conversion whose files are all done (the SLURM finalize job runs this).

    Args:
        src: the v2.1 input.
        out: the v3.0 output, or None for in place.
        work_dir: the conversion's work dir, or None for the default beside the output.
        options: the lease length and the poll interval.
    """
    targets = claim_targets(src, out, work_dir)
    if targets.journal.exists():
        complete_swap(targets)
    else:
        finalize_or_wait(targets, options)
