"""What both dataset writers (v3.0 and v2.1) share: a staging folder moved into place at the end, and the
context-manager protocol (finalize on success, abort on error)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from robostream.format.info import DEFAULT_FEATURES


def move_into_place(stage: Path, root: Path) -> None:
    """Replace `root` by the finished `stage` folder (the previous `root`, if any, is set aside, then removed)."""
    old = root.parent / f".{root.name}.old"
    if root.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(root, old)
    os.replace(stage, root)
    shutil.rmtree(old, ignore_errors=True)


class StagedWriter:
    """Base of the writers: `root`, `fps`, the features with the default index columns, a fresh staging folder
    beside `root`; `with Writer(...) as w:` finalizes on success and aborts (leaving `root` as it was) on error."""

    def __init__(self, root: str | Path, fps: int, features: Mapping[str, Mapping[str, Any]], *,
                 overwrite: bool) -> None:
        self.root = Path(root)
        if self.root.exists() and not overwrite:
            raise FileExistsError(f"{self.root}: already exists; pass overwrite=True to replace it")
        self.fps = int(fps)
        # copies: a writer adds keys (fps) to its features, never to the caller's or to DEFAULT_FEATURES
        self.features = {k: dict(v) for k, v in {**features, **DEFAULT_FEATURES}.items()}
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        self.stage = self.root.parent / f".{self.root.name}.writing"
        shutil.rmtree(self.stage, ignore_errors=True)  # a previous interrupted write

    def finalize(self) -> Path:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()
