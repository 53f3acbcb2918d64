"""Publishing by rename: flushing to disk what a rename is about to publish (a rename can reach the disk before the
data it names), and the scratch folders a result is made in beside its destination.

Only what robostream made is ever deleted: a scratch folder gets a fresh name (never one that exists) and holds a
marker (`.robostream-scratch`) before anything else is put in it; leftovers of interrupted runs are removed only
when they hold it. Anything else named like one (a user's folder or file, a link) is left alone, with a warning.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import warnings
from pathlib import Path

SCRATCH_MARKER = ".robostream-scratch"
REPLACED = "replaced"  # what a publish replaced, inside the scratch folder until it is deleted with it


def fsync_file(path: Path) -> int:
    """Flush a written file to disk; returns its size."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (files created, renamed or removed in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Every file and folder under `root` on disk, before `root` is renamed into place."""
    for folder, _, files in os.walk(root):
        for name in files:
            fsync_file(Path(folder, name))
        fsync_dir(Path(folder))


def make_scratch(parent: Path, prefix: str, *, made_by: str) -> Path:
    """A new folder `<prefix><random>` in `parent` (created if missing), marked as robostream's (made by `made_by`:
    for whoever finds it) before anything is put in it."""
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (scratch / SCRATCH_MARKER).write_text(f"made by {made_by}; deleted with this folder\n")
    return scratch


def _is_scratch(path: Path) -> bool:
    """Whether `path` is a scratch folder robostream made (a folder holding the marker; never a link to one)."""
    return path.is_dir() and not path.is_symlink() and (path / SCRATCH_MARKER).is_file()


def remove_scratch_left(parent: Path, prefix: str, *, made_by: str, keep: Path | None = None) -> None:
    """Remove the scratch folders `<prefix>*` in `parent` that interrupted runs of `made_by` left (the caller is the
    only writer there), except the one holding `keep`. Anything else named like one is not robostream's: left alone,
    with a warning naming it."""
    foreign = []
    for left in sorted(parent.glob(f"{glob.escape(prefix)}*")):
        if not _is_scratch(left):
            foreign.append(left.name)
        elif keep is None or not keep.is_relative_to(left.resolve()):
            shutil.rmtree(left)
    if foreign:
        warnings.warn(
            f"{parent}: {foreign} look like the scratch folders of {made_by} but lack their "
            f"{SCRATCH_MARKER} marker, so they are not removed; delete them yourself if they are not yours",
            stacklevel=3,
        )


def publish(new: Path, final: Path, scratch: Path) -> None:
    """Rename `new` (made in `scratch`) to `final`, then delete `scratch`. What `final` was (a folder, a file, a
    link: moved as a link, never followed) is first moved into `scratch` and deleted with it; a kill between the
    two renames leaves it whole there."""
    if os.path.lexists(final):
        os.replace(final, scratch / REPLACED)
    os.replace(new, final)
    fsync_dir(final.parent)
    shutil.rmtree(scratch)
