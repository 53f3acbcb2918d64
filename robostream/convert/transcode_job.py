"""A transcode as a job of the file-task engine (jobs.py): its tasks re-encode camera files, its finalize links
everything else of the input into the staging dataset and writes the new info.json.

What finalize keeps: data files, meta/episodes (the files and spans it names are unchanged: every frame keeps its
file and its time), tasks, stats.json (computed from the source frames, which the re-encode keeps within the codec's
loss), the cameras not re-encoded (depth cameras always) and any other file of the dataset, hard-linked (copied
where the output is on another filesystem). Hidden entries (`.cache/` of a Hub download, `.gitattributes`) are
not part of the dataset and are left out. info.json changes only in the re-encoded cameras' `info`: what
lerobot 0.6.1 records of a stream and of its encoder.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from robostream.convert.faults import crash_point
from robostream.convert.file_tasks import check_unchanged
from robostream.convert.finalize import place_file
from robostream.convert.manifest import WorkDir
from robostream.convert.plan import FileTask
from robostream.convert.transcode_file import PIX_FMT, TranscodeSettings, transcode_file
from robostream.convert.transcode_plan import TranscodePlan
from robostream.durable import fsync_dir
from robostream.errors import RobostreamError

INFO = "meta/info.json"
ENCODER_FIELDS = ("g", "crf", "preset")  # lerobot records these as video.g/crf/preset, the rest as extra_options


def encoder_info(settings: TranscodeSettings) -> dict[str, object]:
    """A re-encoded camera's `features[key]["info"]` entries, as lerobot 0.6.1 records its own encodes
    (`get_video_info`: the stream's codec and pix_fmt, then the encoder config's fields; the GOP, B-frame and
    closed-GOP options in `video.extra_options`, so a lerobot tool that re-encodes from this config keeps them)."""
    options = settings.encoder_options()
    return {
        "video.codec": settings.codec,  # PyAV's canonical name of the stream's codec, what lerobot reads back
        "video.pix_fmt": PIX_FMT,
        "video.g": settings.gop,
        "video.crf": settings.crf,
        "video.preset": settings.preset,
        "video.fast_decode": 0,
        "video.video_backend": "pyav",
        "video.extra_options": {k: v for k, v in options.items() if k not in ENCODER_FIELDS},
    }


def link_or_copy(source: Path, target: Path) -> None:
    """`target` becomes the same file as `source`: a hard link, or a copy (temp + fsync + rename) across
    filesystems. A target already there is whole (both ways publish atomically) and is kept."""
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
    scratch = target.with_name(f".{target.name}.copy")
    shutil.copyfile(source, scratch)
    with scratch.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(scratch, target)


class TranscodeJob:
    """Re-encode the planned camera files (transcode_file.py); finalize as the module docstring says."""

    def __init__(self, plan: TranscodePlan) -> None:
        self.plan = plan
        self.root = Path(plan.source)

    @classmethod
    def load(cls, plan_path: Path) -> TranscodeJob:
        plan = TranscodePlan.load(plan_path)
        if plan is None:
            raise RobostreamError(f"{plan_path}: no transcode plan; start it with `robostream transcode`")
        return cls(plan)

    @property
    def tasks(self) -> list[FileTask]:
        return self.plan.tasks

    def produce(self, task: FileTask, out: Path) -> int:
        source = self.root / task.output
        check_unchanged([(source, self.plan.size_of(task))])
        return transcode_file(source, out, self.plan.settings)

    def finish_staging(self, work: WorkDir, tmp: Path) -> None:
        made = {t.output for t in self.tasks} | {INFO}
        folders = set()
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root)
            if path.is_dir() or rel.as_posix() in made or any(part.startswith(".") for part in rel.parts):
                continue
            link_or_copy(path, work.staging / rel)
            folders.add((work.staging / rel).parent)
        for folder in sorted(folders):
            fsync_dir(folder)
        crash_point("metadata-written")
        info = json.loads((self.root / INFO).read_text())
        for key in self.plan.cameras:
            info["features"][key].setdefault("info", {}).update(encoder_info(self.plan.settings))
        place_file(work.staging, tmp, INFO, lambda p: p.write_text(json.dumps(info, indent=4)))
