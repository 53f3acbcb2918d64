"""Files derived from a dataset's files (e.g. table columns as .npy), built once per node and shared by every
process on it: ranks, DataLoader workers and later runs.

Each derived folder is keyed by the identity of its source (location, size and, locally, modification time), so
a changed source gets a new folder. A folder is built in a temporary folder beside it and renamed into place when
complete: readers never see a partial build, an interrupted build leaves only a `.building-*` folder (never one
that looks complete; safe to delete), and two processes building the same key at once both succeed (the first
rename wins, the other build is dropped). A complete folder that no longer opens (a truncated or edited file on
this disk) is moved aside and built again once, with a warning; it never fails every later start. Folders are
never evicted automatically: their total is about
the size of the dataset's uncompressed tables (not its videos); remove the folder to reclaim the space.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
# What opening a damaged folder raises (numpy, json and our own checks are ValueErrors; np.load of a cut .npz a
# BadZipFile or EOFError).
DAMAGED = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)

COMPLETE = ".complete"  # written last inside a build: a folder without it is not used


def default_directory() -> Path:
    """$ROBOSTREAM_CACHE, else ~/.cache/robostream (XDG_CACHE_HOME honoured)."""
    explicit = os.environ.get("ROBOSTREAM_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "robostream"


class DerivedCache:
    """Folders derived from source files, built once per node (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(f"{self.directory}: cannot create the derived-data cache ({exc}); set ROBOSTREAM_CACHE "
                          "or ReadOptions(cache_dir=...) to a writable local folder") from exc

    def folder(self, identity: str, build: Callable[[Path], None]) -> Path:
        """The folder derived from the source named by `identity`, built by `build(folder)` when missing."""
        target = self.directory / hashlib.sha256(identity.encode()).hexdigest()[:40]
        if (target / COMPLETE).is_file():
            return target
        staging = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".building-{target.name}-"))
        try:
            build(staging)
            (staging / COMPLETE).write_text(identity)
            try:
                os.rename(staging, target)
            except OSError:
                if not (target / COMPLETE).is_file():
                    raise
                # Another process finished the same build first: its folder is as good as ours.
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def open(self, identity: str, build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
        """`load(folder)` of the folder derived from `identity` (built when missing). A folder that fails to load
        is moved aside and rebuilt once; if the rebuilt one fails too, that error propagates (the source itself
        is at fault)."""
        folder = self.folder(identity, build)
        try:
            return load(folder)
        except DAMAGED as exc:
            warnings.warn(f"{folder}: the derived-data cache entry is damaged ({type(exc).__name__}: {exc}); "
                          "rebuilding it", RuntimeWarning, stacklevel=2)
            aside = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".broken-{folder.name}-"))
            try:
                os.rename(folder, aside / "entry")  # atomic: other processes see the old entry or none
            except FileNotFoundError:
                pass  # another process moved it first
            shutil.rmtree(aside, ignore_errors=True)
        return load(self.folder(identity, build))
