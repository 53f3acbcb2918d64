"""The one rule for the node's cache folders (the disk cache of whole files, storage/cache.py, and the derived
folders, storage/derived.py): entries are read and written only in a folder no other user can write to.

- The folder named ($ROBOSTREAM_CACHE, ReadOptions(cache_dir=...), ~/.cache/robostream) is used as it is when it
  belongs to this user and neither its group nor others may write to it.
- Otherwise (a shared folder: mode 1777, a team's group-writable folder) this user's entries go to its subfolder
  `<uid>`, created with mode 0700. An existing one that is not this user's own, or that others may write to, is
  refused: its entries could have been planted by another user.
- A folder this user cannot create or write to is a CacheError naming it and how to choose another, never a bare
  PermissionError from inside a build.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from robostream.errors import CacheError

CHOOSE_ANOTHER = "set ROBOSTREAM_CACHE or ReadOptions(cache_dir=...) to a local folder you can write to"


def owned_folder(directory: str | Path, what: str) -> Path:
    """The folder under `directory` (created if missing) where this user's `what` entries live (module docstring)."""
    directory = Path(directory).expanduser()
    _make(directory, what)
    if not _private(os.stat(directory)):
        directory = directory / str(os.geteuid())
        _make(directory, what, mode=0o700)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or not _private(info):
            raise CacheError(
                f"{directory}: this user's {what} folder in a shared cache folder belongs to uid "
                f"{info.st_uid} with mode {stat.filemode(info.st_mode)}, so another user could have "
                f"written its entries; remove it (it is made again, 0700), or {CHOOSE_ANOTHER}"
            )
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        raise CacheError(f"{directory}: the {what} folder is not writable by this user; {CHOOSE_ANOTHER}")
    return directory


def _make(directory: Path, what: str, mode: int = 0o777) -> None:
    try:
        directory.mkdir(mode=mode, parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"{directory}: cannot create the {what} folder ({exc}); {CHOOSE_ANOTHER}") from exc


def _private(info: os.stat_result) -> bool:
    """Whether only this user (and root) can write to a folder with this stat."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
