"""What both dataset writers (v3.0 and v2.1) share: a staging folder moved into place at the end, and the
context-manager protocol (finalize on success, abort on error)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Self


def move_into_place(stage: Path, root: Path) -> None:
    """Replace `root` by the finished `stage` folder (the previous `root`, if any, is set aside, then removed)."""
    old = root.parent / f".{root.name}.old"
    if root.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(root, old)
    os.replace(stage, root)
    shutil.rmtree(old, ignore_errors=True)


class StagedWriter:
    """Mixin: `with Writer(...) as w:` finalizes on success and aborts (leaving `root` as it was) on error."""

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
