"""The path templates of a dataset's files, rendered and checked with storage's safe-path rule (storage/paths.py).

Metadata comes from files a user downloaded; a template such as `../../etc/{x}` or an absolute path must never make
a reader or the writer touch anything outside the dataset root.
"""

from __future__ import annotations

from typing import Any

from robostream.errors import DatasetFormatError
from robostream.storage.paths import check_relative

DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


def render_template(template: str, *, what: str, **fields: Any) -> str:
    """Fill a path template like `data/chunk-{chunk_index:03d}/...` and check the result is safe."""
    check_relative(template.replace("{", "").replace("}", ""), what=what)
    try:
        rendered = template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise DatasetFormatError(f"{what}: cannot fill template {template!r} with {fields}: {exc!r}") from exc
    return check_relative(rendered, what=f"{what} (rendered from {template!r})")
