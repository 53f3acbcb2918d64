"""Safe relative paths under a root: what every path handed to storage must be.

A path that comes from a dataset's metadata (a file a user downloaded) must never make a reader or a writer touch
anything outside the dataset root: no absolute paths, no `..`, no backslashes. Paths are POSIX strings so the
same rule holds for local roots and for remote (URL) roots.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from robostream.errors import UnsafePathError


def check_relative(path: str, *, what: str) -> str:
    """Return `path` normalised if it is a relative POSIX path that stays inside the root, else raise.

    `what` names where the path came from (e.g. "info.json data_path") so the error can point at it.
    """
    if not isinstance(path, str) or not path:
        raise UnsafePathError(f"{what}: expected a non-empty relative path, got {path!r}")
    if "\\" in path or "\x00" in path:
        raise UnsafePathError(f"{what}: {path!r} contains a backslash or NUL byte; use '/'-separated relative paths")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":") or "://" in path:
        raise UnsafePathError(f"{what}: {path!r} is absolute; dataset paths must be relative to the dataset root")
    parts = path.split("/")
    if ".." in parts:
        raise UnsafePathError(f"{what}: {path!r} contains '..' and could escape the dataset root")
    return posixpath.normpath(path)


def local_path(root: str | Path, relative: str, *, what: str) -> Path:
    """Join a checked relative path onto a local root; the result is guaranteed to lie under the root."""
    rel = check_relative(relative, what=what)
    root_path = Path(root).resolve()
    full = (root_path / rel).resolve()
    if root_path != full and root_path not in full.parents:
        raise UnsafePathError(f"{what}: {relative!r} resolves to {full}, outside the dataset root {root_path}")
    return full
