"""What both dataset writers (v3.0 and v2.1) share: a staging folder moved into place at the end, and the
context-manager protocol (finalize on success, abort on error).

The staging folder is `dataset` inside a scratch folder beside `root` (`.<root>.writing-<random>`, marked as
robostream's before anything is put in it: durable.make_scratch). Only such marked folders are ever deleted: those
of interrupted writes when the next writer of `root` starts, this writer's own when it ends. A user's folder or
file named like one is left alone, with a warning. One writer per `root` at a time.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from robostream.durable import make_scratch, publish, remove_scratch_left
from robostream.format.info import DEFAULT_FEATURES

SCRATCH_MADE_BY = "robostream's dataset writers"


class StagedWriter:
    """Base of the writers: `root`, `fps`, the features with the default index columns, a fresh staging folder
    beside `root`; `with Writer(...) as w:` finalizes on success and aborts (leaving `root` as it was) on error."""

    def __init__(
        self, root: str | Path, fps: int, features: Mapping[str, Mapping[str, Any]], *, overwrite: bool
    ) -> None:
        self.root = Path(root)
        if self.root.exists() and not overwrite:
            raise FileExistsError(f"{self.root}: already exists; pass overwrite=True to replace it")
        self.fps = int(fps)
        # copies: a writer adds keys (fps) to its features, never to the caller's or to DEFAULT_FEATURES
        self.features = {k: dict(v) for k, v in {**features, **DEFAULT_FEATURES}.items()}
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        prefix = f".{self.root.name}.writing-"
        remove_scratch_left(self.root.parent, prefix, made_by=SCRATCH_MADE_BY)  # of interrupted writes
        self._scratch = make_scratch(self.root.parent, prefix, made_by=SCRATCH_MADE_BY)
        self.stage = self._scratch / "dataset"

    def move_into_place(self) -> None:
        """Replace `root` (a folder, a file or a link: the link replaced, never followed) by the finished staging
        folder, and remove the scratch folder with what `root` was."""
        publish(self.stage, self.root, self._scratch)

    def remove_stage(self) -> None:
        """Discard the scratch folder and everything staged (`root` is left as it was). Errors are ignored: this runs
        while another error propagates, and the next writer of `root` removes a marked leftover."""
        shutil.rmtree(self._scratch, ignore_errors=True)

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
