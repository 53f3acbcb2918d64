"""Safe resolution of the relative paths a dataset's metadata points to.

Metadata comes from files a user downloaded; a template such as `../../etc/{x}` or an absolute path must never make
a reader or the writer touch anything outside the dataset root. All paths are handled as POSIX strings so the same
rules apply to local roots and to remote (URL) roots.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from robostream.errors import DatasetFormatError, UnsafePathError

DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


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


def render_template(template: str, *, what: str, **fields: Any) -> str:
    """Fill a path template like `data/chunk-{chunk_index:03d}/...` and check the result is safe."""
    check_relative(template.replace("{", "").replace("}", ""), what=what)
    try:
        rendered = template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise DatasetFormatError(
            f"{what}: cannot fill template {template!r} with {fields}: {exc!r}"
        ) from exc
    return check_relative(rendered, what=f"{what} (rendered from {template!r})")


def local_path(root: str | Path, relative: str, *, what: str) -> Path:
    """Join a checked relative path onto a local root; the result is guaranteed to lie under the root."""
    rel = check_relative(relative, what=what)
    root_path = Path(root).resolve()
    full = (root_path / rel).resolve()
    if root_path != full and root_path not in full.parents:
        raise UnsafePathError(f"{what}: {relative!r} resolves to {full}, outside the dataset root {root_path}")
    return full
