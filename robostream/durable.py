"""Flushing to disk what a rename is about to publish (a rename can reach the disk before the data it names)."""

from __future__ import annotations

import os
from pathlib import Path


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
