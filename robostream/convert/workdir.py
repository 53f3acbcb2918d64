"""The conversion's work dir belongs to the conversion: claimed before anything is written, removed when it ends.

A conversion deletes its work dir when it finishes, so it must never take a folder that holds anything else: it
creates the work dir itself, or adopts an existing EMPTY folder, and writes a marker (`.robostream-convert`) first.
A later run (a resume, another machine joining) recognises the marker. A folder that is, holds or lies inside the
input or the output is refused, as is a non-empty folder without the marker. At the end the conversion removes
the folder it created, or, for an adopted folder, only what it put there (the folder itself stays).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from robostream.convert.manifest import read_json
from robostream.durable import fsync_dir
from robostream.errors import RobostreamError

MARKER = ".robostream-convert"


def _relation(work: Path, other: Path) -> str | None:
    """How `work` overlaps `other` (both resolved): "is", "lies inside", "contains", or None."""
    if work == other:
        return "is"
    if other in work.parents:
        return "lies inside"
    if work in other.parents:
        return "contains"
    return None


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
            raise RobostreamError(f"--work-dir {work}: {relation} {what} {folder}; the work dir is deleted when the "
                                  "conversion ends, so it must be a folder of its own: pass a new or empty folder "
                                  "elsewhere (the default is beside the output)")
    if (work / MARKER).is_file():
        return  # ours: a resumed conversion, or another process of this one
    try:
        work.mkdir()
        created = True
    except FileExistsError:
        if not work.is_dir():
            raise RobostreamError(f"--work-dir {work}: exists and is not a folder; pass a new or empty folder") from None
        if any(entry.name != MARKER for entry in work.iterdir()):
            raise RobostreamError(
                f"--work-dir {work}: exists and holds files that are not a robostream conversion's (no {MARKER} "
                "marker); the conversion deletes its work dir when it finishes, so it only takes a new or empty "
                "folder. Pass another one (a work dir left by an earlier robostream version cannot be resumed: delete "
                "it and convert again)")
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


def remove_work_dir(work: Path) -> None:
    """Remove what the conversion made: the whole folder it created, or the contents of an adopted one."""
    marker = read_json(work / MARKER)
    if not isinstance(marker, dict):
        raise RobostreamError(f"{work}: the {MARKER} marker is missing or unreadable; the work dir was not removed "
                              "(nothing proves it is the conversion's own): delete it yourself once you have checked")
    if marker.get("created"):
        shutil.rmtree(work)
        fsync_dir(work.parent)
        return
    for entry in work.iterdir():
        if entry.name != MARKER:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    (work / MARKER).unlink()
    fsync_dir(work)
