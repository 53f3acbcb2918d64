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


def _link_targets(root: Path) -> tuple[Path, ...]:
    """Folders a file under `root` may resolve into: the root itself and, when the root lies in a Hugging Face hub
    cache snapshot (`<repo>/snapshots/<revision>/...`), that repo's `blobs/` folder: the cache stores every file of
    a snapshot as a symlink to `../../blobs/<hash>`, which stays inside the cache's own tree."""
    for folder in (root, *root.parents):
        if folder.parent.name == "snapshots" and (folder.parent.parent / "blobs").is_dir():
            return root, folder.parent.parent / "blobs"
    return (root,)


def local_path(root: str | Path, relative: str, *, what: str) -> Path:
    """Join a checked relative path onto a local root and resolve its symlinks; the result is guaranteed to lie
    under the root (or to be a blob of the hub cache snapshot the root is in): the one safe-path rule of every
    reader, the converter and verify."""
    rel = check_relative(relative, what=what)
    root_path = Path(root).resolve()
    full = (root_path / rel).resolve()
    if root_path == full or root_path in full.parents:
        return full
    if any(full.parent == blobs for blobs in _link_targets(root_path)[1:]):
        return full
    raise UnsafePathError(
        f"{what}: {relative!r} resolves to {full}, outside the dataset root {root_path} (a "
        "symlink leads out of the dataset); copy the file into the dataset, or open the dataset "
        "where its files really are"
    )
