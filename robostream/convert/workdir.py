"""The conversion's work dir belongs to the conversion: claimed before anything is written, emptied when it ends.

A conversion removes its work dir when it finishes, so it must never take a folder that holds anything else: it
creates the work dir itself, or adopts an existing EMPTY folder, and writes a marker (`.robostream-convert`) first.
A later run (a resume, another machine joining) recognises the marker. A folder that is, holds or lies inside the
input or the output is refused, as is a non-empty folder without the marker. At the end the conversion removes
what it made there, and nothing else: the entries of its layout (`MADE_HERE`, see manifest.py; the folders in it
are the conversion's alone), their atomic-write temp files, then the marker; then the folder itself if the
conversion created it and nothing is left in it. Files someone added meanwhile (into a work dir an interrupted
run left behind) stay where they are, with the folder, and a warning names them.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

from robostream.convert.manifest import is_temp_of, read_json
from robostream.durable import fsync_dir
from robostream.errors import RobostreamError

MARKER = ".robostream-convert"
JOURNAL = "swap.json"
# What a conversion makes at the top of its work dir: the plan (planning.py), manifest.py's layout, the finalize
# step's scratch folder and the swap journal. A name missing here is kept at the end with a warning, never lost.
MADE_HERE = (
    "plan.json",
    "probes.arrays",
    "episode_stats.arrays",
    "leases",
    "attempts",
    "staging",
    "done",
    "failures",
    "tmp",
    JOURNAL,
)


def _relation(work: Path, other: Path) -> str | None:
    """How `work` overlaps `other` (both resolved): "is", "lies inside", "contains", or None."""
    if work == other:
        return "is"
    if other in work.parents:
        return "lies inside"
    if work in other.parents:
        return "contains"
    return None


def holds_conversion(work: Path) -> bool:
    """Whether `work` is a conversion's work dir (marked): under way, interrupted or being removed. A folder kept
    after the end because someone's files were added to it is not."""
    return (work / MARKER).is_file()


def claim_work_dir(work: Path, *, protected: dict[str, Path]) -> None:
    """Create (or adopt an empty) `work` and mark it as this conversion's; refuse anything else.

    Args:
        work: the work dir (absolute).
        protected: folders the work dir must not be, contain or lie inside, by what they are ("the input", ...).
    """
    resolved = work.resolve()
    for what, folder in protected.items():
        relation = _relation(resolved, folder.resolve())
        if relation is not None:
            raise RobostreamError(
                f"--work-dir {work}: {relation} {what} {folder}; the work dir is deleted when the "
                "conversion ends, so it must be a folder of its own: pass a new or empty folder "
                "elsewhere (the default is beside the output)"
            )
    if holds_conversion(work):
        return  # ours: a resumed conversion, or another process of this one
    try:
        work.mkdir()
        created = True
    except FileExistsError:
        if not work.is_dir():
            raise RobostreamError(
                f"--work-dir {work}: exists and is not a folder; pass a new or empty folder"
            ) from None
        if any(entry.name != MARKER for entry in work.iterdir()):
            raise RobostreamError(
                f"--work-dir {work}: exists and holds files that are not a robostream conversion's (no {MARKER} "
                "marker); the conversion deletes its work dir when it finishes, so it only takes a new or empty "
                "folder. Pass another one (a work dir left by an earlier robostream version cannot be resumed: delete "
                "it and convert again)"
            )
        created = False
    try:  # O_EXCL: a process that created the folder and one that adopts it at the same moment write it once
        fd = os.open(work / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"created": created}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(work)


def _made_by_conversion(name: str) -> bool:
    return name in MADE_HERE or any(is_temp_of(name, made) for made in MADE_HERE)


def _remove(entry: Path) -> None:
    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def remove_work_dir(work: Path) -> None:
    """Remove what the conversion made in `work` (see the module docstring); warn about anything else in it."""
    marker = read_json(work / MARKER)
    if not isinstance(marker, dict):
        raise RobostreamError(
            f"{work}: the {MARKER} marker is missing or unreadable; the work dir was not removed "
            "(nothing proves it is the conversion's own): delete it yourself once you have checked"
        )
    entries = sorted(e for e in work.iterdir() if e.name != MARKER)
    others = [e.name for e in entries if not _made_by_conversion(e.name)]
    # the journal last: while it exists, a rerun completes an interrupted swap and this clean-up
    for entry in sorted((e for e in entries if _made_by_conversion(e.name)), key=lambda e: e.name == JOURNAL):
        _remove(entry)
    (work / MARKER).unlink()
    if marker.get("created") and not others:
        work.rmdir()
        fsync_dir(work.parent)
        return
    fsync_dir(work)
    if others:
        warnings.warn(
            f"{work}: kept, holding {others}, which the conversion did not make (added while it was "
            "interrupted?); it removed only its own files. Move them elsewhere and delete the folder",
            stacklevel=2,
        )
