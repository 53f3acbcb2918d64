"""Files derived from a dataset's files (e.g. table columns as raw bytes), built once per node and shared by every
process of this user on it: ranks, DataLoader workers and later runs.

Each derived folder is keyed by the identity of its source, what names its content (storage/store.py
`Storage.identity`: location, size and a version token: locally modification time, inode and change time;
remotely a published hash, an ETag or Last-Modified), so a changed source gets a new folder; a source nothing but
its size names gets none (the callers read it directly). A folder is built in a temporary folder beside it and
renamed into place when complete: readers never see a partial build, an interrupted build leaves only a
`.building-*` folder (never one that looks complete; safe to delete), and two processes building the same key at
once both succeed (the first rename wins, the other build is dropped).

Trust: the folders live where only this user can write (storage/cache_folder.py). The completion record
(`.complete`, written last) holds the size and sha256 of every file of the build, and no identity (a URL's
credentials never reach the disk). A process checks each folder against its record the first time it opens it
(one read and sha256 of the folder's files: about 0.15 s per 100 MiB, once per process and folder; the files are
the tables, never the videos) and afterwards while its files' stats are those it had then (names, sizes,
modification and change times, inodes: what names a local file's version everywhere in robostream; a write changes
the change time, a replacement the inode), so a dataset constructed again sees an entry damaged since for a stat
per file. A folder that fails the check or no longer loads (a truncated, edited or
bit-flipped file, a file added) is moved aside and built again once, with a warning naming the folder; it never
fails every later start. Folders are never evicted automatically: their total is about the size of the dataset's
uncompressed tables (not its videos); remove the folder to reclaim the space.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from robostream.storage.cache_folder import owned_folder

T = TypeVar("T")
# What opening a damaged folder raises (numpy, json, pyarrow's wrapping and our own checks are ValueErrors).
DAMAGED = (OSError, ValueError, KeyError)

COMPLETE = ".complete"  # written last inside a build: the size and sha256 of each file; a folder without it is unused

FileStats = tuple[tuple[str, int, int, int, int], ...]  # (name, size, mtime_ns, ctime_ns, inode) per file, sorted
# Folders checked against their record (or built) in this process, by any DerivedCache, with their files' stats then.
_verified: dict[Path, FileStats] = {}
# What `open(..., keep_as=name)` loaded, by that name: the folder, its files' stats when it was checked, the object.
_kept: dict[str, tuple[Path, FileStats, Any]] = {}


class DamagedEntry(ValueError):
    """A derived folder's files are not those its completion record lists."""


def default_directory() -> Path:
    """$ROBOSTREAM_CACHE, else ~/.cache/robostream (XDG_CACHE_HOME honoured)."""
    explicit = os.environ.get("ROBOSTREAM_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "robostream"


class DerivedCache:
    """Folders derived from source files, built once per node (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = owned_folder(directory, "derived-data cache")

    def folder(self, identity: str, build: Callable[[Path], None]) -> Path:
        """The folder derived from the source named by `identity`, built by `build(folder)` when missing."""
        target = self.directory / hashlib.sha256(identity.encode()).hexdigest()[:40]
        if (target / COMPLETE).is_file():
            return target
        staging = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".building-{target.name}-"))
        try:
            build(staging)
            (staging / COMPLETE).write_text(json.dumps({"files": _digests(staging)}))
            try:
                os.rename(staging, target)
                _verified[target] = _file_stats(target)  # its record was computed from these very bytes
            except OSError:
                if not (target / COMPLETE).is_file():
                    raise
                # Another process finished the same build first: its folder is as good as ours (checked at open).
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def open(
        self, identity: str, build: Callable[[Path], None], load: Callable[[Path], T], *, keep_as: str | None = None
    ) -> T:
        """`load(folder)` of the folder derived from `identity` (built when missing), checked against its record
        first. A folder that fails the check or the load is moved aside and rebuilt once; if the rebuilt one
        fails too, that error propagates (the source itself is at fault).

        Args:
            identity: what names the source's content (see the module docstring).
            build: writes the folder's files into the folder it is given.
            load: reads the folder.
            keep_as: hold what `load` returned for this process under this name (one object per name: a dataset's
                location, so a changed dataset's new folder replaces its old one) and return that very object again
                while it is this folder's and the folder's files keep their stats (a small result that its callers
                never change: the metadata snapshot).
        """
        folder = self.folder(identity, build)
        kept = _kept.get(keep_as) if keep_as is not None else None
        try:
            if kept is not None and kept[0] == folder and kept[1] == _file_stats(folder):
                return kept[2]
            return self._load(folder, load, keep_as)
        except DAMAGED as exc:
            warnings.warn(
                f"{folder}: the derived-data cache entry is damaged ({type(exc).__name__}: {exc}); rebuilding it",
                RuntimeWarning,
                stacklevel=2,
            )
            _verified.pop(folder, None)
            aside = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".broken-{folder.name}-"))
            try:
                os.rename(folder, aside / "entry")  # atomic: other processes see the old entry or none
            except FileNotFoundError:
                pass  # another process moved it first
            shutil.rmtree(aside, ignore_errors=True)
        return self._load(self.folder(identity, build), load, keep_as)

    def _load(self, folder: Path, load: Callable[[Path], T], keep_as: str | None) -> T:
        stats = self._check(folder)
        loaded = load(folder)
        if keep_as is not None:
            _kept[keep_as] = (folder, stats, loaded)
        return loaded

    def _check(self, folder: Path) -> FileStats:
        """Every file of `folder` is one its completion record lists, with that size and sha256 (once per process
        while its files' stats stay those of that check: the rows are then read from the files as they are)."""
        stats = _file_stats(folder)  # before the hash: a write during it makes the next check hash again
        if _verified.get(folder) == stats:
            return stats
        listed = _record(folder)
        found = _digests(folder)
        if found != listed:
            wrong = sorted(name for name in listed.keys() | found.keys() if listed.get(name) != found.get(name))
            raise DamagedEntry(
                f"{folder}: {', '.join(wrong)}: not the file(s) its {COMPLETE} lists (added, "
                "removed or changed since it was built)"
            )
        _verified[folder] = stats
        return stats


def _files(folder: Path) -> list[tuple[str, os.DirEntry]]:
    """Every file of a build folder (its completion record aside) by its name relative to it, sorted."""
    found = []
    pending = [("", str(folder))]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append((f"{prefix}{entry.name}/", entry.path))
                elif entry.is_file() and (prefix or entry.name != COMPLETE):
                    found.append((prefix + entry.name, entry))
    return sorted(found, key=lambda item: item[0])


def _file_stats(folder: Path) -> FileStats:
    """The stats that name the version of each file of a build folder (its completion record too: a record
    rewritten since must be read again)."""
    stats = [(name, entry.stat()) for name, entry in _files(folder)]
    record = os.stat(folder / COMPLETE)
    return tuple(
        (name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        for name, stat in [*stats, (COMPLETE, record)]
    )


def _digests(folder: Path) -> dict[str, list[Any]]:
    """[size, sha256] of every file in a build folder (its completion record aside), by name relative to it."""
    found: dict[str, list[Any]] = {}
    for name, entry in _files(folder):
        hasher = hashlib.sha256()
        with open(entry.path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
        found[name] = [os.stat(entry.path).st_size, hasher.hexdigest()]
    return found


def _record(folder: Path) -> dict[str, list[Any]]:
    """The files a folder's completion record lists (DamagedEntry when it is not one)."""
    try:
        files = json.loads((folder / COMPLETE).read_text())["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedEntry(f"{folder / COMPLETE}: not a completion record ({type(exc).__name__}: {exc})") from exc
    if not isinstance(files, dict):
        raise DamagedEntry(f"{folder / COMPLETE}: not a completion record (files: {type(files).__name__})")
    return files
