"""Planning a transcode: check the v3.0 input and the options, then list the camera files to re-encode.

One task per (camera, video file): the output file has the input's path, so the episode table's file columns and
spans stay as they are. Everything else of the input is linked (or copied) untouched at finalize
(transcode_job.py). The plan is a small JSON document (a few entries per camera), saved in the work dir like a
conversion's, so a rerun of the same command resumes it and a different command is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from robostream.convert.manifest import read_json, write_json_atomic
from robostream.convert.plan import FileSpan, FileTask
from robostream.convert.transcode_file import DEFAULT_CRF, DEFAULT_PRESET, TargetCodec, TranscodeSettings
from robostream.errors import DatasetFormatError
from robostream.format.info import CODEBASE_VERSION
from robostream.format.metadata import DatasetMetadata, load_metadata
from robostream.numbers import finite_number
from robostream.video.encode import encoder_name

TRANSCODE = "transcode"  # plan.json's "job"
TARGET_CODECS: tuple[TargetCodec, ...] = ("h264", "hevc", "av1")
MAX_CRF = 63  # the largest any of the encoders takes (SVT-AV1; x264/x265 stop at 51 and say so)


def transcode_settings(*, codec: Any, gop: Any, crf: Any = None, preset: str | int | None = None) -> TranscodeSettings:
    """Check the options (naming the value and what to pass instead) and fill in the codec's defaults.

    Args:
        codec: "h264", "hevc" or "av1".
        gop: frames from one keyframe to the next, >= 1.
        crf: constant-quality level; None: the codec's default (DEFAULT_CRF).
        preset: the encoder's speed preset; None: the codec's default (DEFAULT_PRESET).
    """
    if codec not in TARGET_CODECS:
        raise ValueError(f"--codec {codec!r}: expected one of {list(TARGET_CODECS)}")
    encoder_name(codec)  # refuses a PyAV build without the encoder, by name
    gop = finite_number(gop, what="--gop (frames from one keyframe to the next)", integer=True, minimum=1)
    crf = DEFAULT_CRF[codec] if crf is None else crf
    crf = finite_number(crf, what="--crf", integer=True, minimum=0)
    if crf > MAX_CRF:
        raise ValueError(f"--crf {crf}: above {MAX_CRF}; pass a quality level from 0 (best) to {MAX_CRF}")
    return TranscodeSettings(codec, int(gop), int(crf), DEFAULT_PRESET[codec] if preset is None else preset)


@dataclass(frozen=True)
class TranscodeFile:
    """One camera file to re-encode: its task (camera, chunk/file index, episodes in it) and its planned size."""

    video_key: str
    chunk_index: int
    file_index: int
    first: int  # the episodes [first, end) in it (in the episode table's order)
    end: int
    bytes: int

    @property
    def task(self) -> FileTask:
        return FileTask("video", self.video_key, FileSpan(self.chunk_index, self.file_index, self.first, self.end))


@dataclass(frozen=True)
class TranscodePlan:
    """What a transcode reads and writes: the work dir's plan.json."""

    source: str  # the input folder, resolved
    fingerprint: str  # of the input's metadata and the settings: a work dir only resumes the same transcode
    settings: TranscodeSettings
    cameras: list[str]  # re-encoded, in info.json order
    files: list[TranscodeFile]

    @property
    def tasks(self) -> list[FileTask]:
        return [f.task for f in self.files]

    def size_of(self, task: FileTask) -> int:
        """The planned size of the input file `task` re-encodes."""
        return next(f.bytes for f in self.files if f.task == task)

    def save(self, plan_path: Path) -> None:
        doc = {
            "job": TRANSCODE,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "settings": asdict(self.settings),
            "cameras": self.cameras,
            "files": [asdict(f) for f in self.files],
        }
        write_json_atomic(plan_path, doc)

    @classmethod
    def load(cls, plan_path: Path) -> TranscodePlan | None:
        doc = read_json(plan_path)
        if doc is None:
            return None
        return cls(
            doc["source"],
            doc["fingerprint"],
            TranscodeSettings(**doc["settings"]),
            doc["cameras"],
            [TranscodeFile(**f) for f in doc["files"]],
        )


def _checked_source(root: Path) -> DatasetMetadata:
    """The metadata of the v3.0 dataset at `root`; other versions are refused with what to do."""
    info = read_json(root / "meta" / "info.json") if root.is_dir() else None
    if not isinstance(info, dict):
        raise DatasetFormatError(f"{root}: not a LeRobot dataset (no readable meta/info.json)")
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise DatasetFormatError(
            f"{root}: codebase_version {version!r}; transcode reads LeRobot {CODEBASE_VERSION} datasets: convert it "
            f"first (`robostream convert {root} --out DIR`), then transcode DIR"
        )
    return load_metadata(root)


def chosen_cameras(meta: DatasetMetadata, cameras: Sequence[str] | None) -> list[str]:
    """The cameras to re-encode: the named ones (checked), else every RGB video camera, in info.json order.

    Depth cameras are lossless 12-bit gray (lerobot's depth encoder): a yuv420p re-encode would lose their codes, so
    naming one is refused; by default they are copied untouched.
    """
    depth = set(meta.info.depth_codings)
    rgb = [k for k in meta.info.video_keys if k not in depth]
    if cameras is None:
        if not rgb:
            raise DatasetFormatError(f"{meta.root}: no RGB video camera to transcode (video features: none or depth)")
        return rgb
    for key in cameras:
        if key in depth:
            raise ValueError(
                f"--cameras {key}: a depth camera (lossless 12-bit gray HEVC, lerobot's depth encoding); re-encoding "
                "it to yuv420p would lose its depth codes, so it is kept untouched. Name RGB cameras only: "
                f"{rgb}"
            )
        if key not in rgb:
            raise ValueError(f"--cameras {key}: not a video camera of {meta.root}; its RGB video cameras: {rgb}")
    return [k for k in rgb if k in cameras]


def _camera_files(meta: DatasetMetadata, root: Path, key: str) -> list[TranscodeFile]:
    """The camera's files in (chunk, file) order, with the episodes each holds."""
    table = meta.episodes
    rows: dict[tuple[int, int], list[int]] = {}
    for row in range(len(table)):
        rows.setdefault((int(table.video_chunk[key][row]), int(table.video_file[key][row])), []).append(row)
    files = []
    for (chunk_index, file_index), held in sorted(rows.items()):
        episode = int(table.episode_index[held[0]])
        rel = meta.video_file(episode, key)
        file = TranscodeFile(key, chunk_index, file_index, min(held), max(held) + 1, 0)
        if rel != file.task.output:
            raise DatasetFormatError(
                f"{root / 'meta/info.json'}: video_path renders {rel!r} for camera {key!r}, not lerobot's layout "
                f"{file.task.output!r}; transcode writes lerobot's layout only: rewrite video_path"
            )
        size = (root / rel).stat().st_size  # FileNotFoundError names the missing file
        files.append(TranscodeFile(key, chunk_index, file_index, file.first, file.end, size))
    return files


def fingerprint(root: Path, settings: TranscodeSettings, cameras: list[str]) -> str:
    """Hash of the input's metadata files and the settings (what determines the output)."""
    digest = hashlib.sha256(json.dumps([asdict(settings), cameras]).encode())
    for path in [root / "meta" / "info.json", *sorted((root / "meta" / "episodes").rglob("*.parquet"))]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def make_transcode_plan(root: Path, settings: TranscodeSettings, cameras: Sequence[str] | None) -> TranscodePlan:
    """Check the input and list the files to re-encode (reads metadata only).

    Args:
        root: the v3.0 input folder.
        settings: checked settings (`transcode_settings`).
        cameras: the cameras to re-encode; None: every RGB video camera.
    """
    meta = _checked_source(root)
    chosen = chosen_cameras(meta, cameras)
    files = [f for key in chosen for f in _camera_files(meta, root, key)]
    return TranscodePlan(str(root.resolve()), fingerprint(root, settings, chosen), settings, chosen, files)
