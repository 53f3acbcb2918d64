"""`meta/info.json`: the dataset's header (version, fps, features, path templates), read tolerantly.

Unknown keys are kept in `raw` and otherwise ignored, so datasets written by newer or older `lerobot` versions load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from robostream.errors import DatasetFormatError, UnsupportedVersionError
from robostream.format.depth import DepthCoding, depth_coding, is_depth_feature
from robostream.format.language import LANGUAGE_DTYPE, check_language_feature
from robostream.format.paths import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH
from robostream.numbers import finite_number
from robostream.storage.paths import check_relative

CODEBASE_VERSION = "v3.0"
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILE_MB = 100
DEFAULT_VIDEO_FILE_MB = 200
# Columns every LeRobot dataset has, with the dtype lerobot writes them in.
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
CAMERA_OR_TEXT_DTYPES = ("video", "image", "string", LANGUAGE_DTYPE)
# A video stream's average frame rate may differ from the dataset's fps by rounding (concatenated files, B-frames);
# a real mismatch (a 40 fps file in a 20 fps dataset) is far larger.
FPS_RELATIVE_TOLERANCE = 0.01
CONVERT_HINT = (
    "convert it to v3.0 first, e.g. with lerobot's "
    "`python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id=<repo> --root=<root>`"
)


@dataclass(frozen=True)
class DatasetInfo:
    """The parsed fields of info.json that robostream uses; `raw` holds the whole document."""

    codebase_version: str
    fps: int | float  # an int when whole (what lerobot writes), else as given (29.97)
    features: dict[str, dict[str, Any]]
    total_episodes: int
    total_frames: int
    total_tasks: int
    chunks_size: int
    data_files_size_in_mb: float
    video_files_size_in_mb: float
    data_path: str
    video_path: str | None
    robot_type: str | None
    splits: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def video_keys(self) -> list[str]:
        """Camera features stored as mp4 video, in info.json order."""
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @cached_property
    def image_keys(self) -> list[str]:
        """Camera features stored as PNG bytes inside the data parquet."""
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]

    @cached_property
    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @cached_property
    def depth_codings(self) -> dict[str, DepthCoding]:
        """Depth cameras (video features marked as depth maps, format/depth.py) and their quantisation, in info.json
        order (checked when info.json was parsed)."""
        return {
            k: depth_coding(f, key=k, source="meta/info.json")
            for k, f in self.features.items()
            if f.get("dtype") == "video" and is_depth_feature(f)
        }

    @cached_property
    def cameras_gop(self) -> int | None:
        """Frames per GOP of the video cameras as info.json records it (`video.g`, lerobot's encoder setting), when
        every camera has the same; None when any lacks it or they differ."""
        gops = {video_info(self.features[key]).get("video.g") for key in self.video_keys}
        gop = gops.pop() if len(gops) == 1 else None
        return gop if isinstance(gop, int) and gop > 0 else None

    def to_json_dict(self) -> dict[str, Any]:
        """The info.json document, keeping any unknown keys it was read with."""
        doc = dict(self.raw)
        doc.update(
            codebase_version=self.codebase_version,
            robot_type=self.robot_type,
            total_episodes=self.total_episodes,
            total_frames=self.total_frames,
            total_tasks=self.total_tasks,
            chunks_size=self.chunks_size,
            data_files_size_in_mb=self.data_files_size_in_mb,
            video_files_size_in_mb=self.video_files_size_in_mb,
            fps=self.fps,
            splits=self.splits,
            data_path=self.data_path,
            video_path=self.video_path,
            features=self.features,
        )
        return doc


def video_info(feature: Mapping[str, Any]) -> Mapping[str, Any]:
    """A video feature's "info" block (how lerobot encoded it: video.codec, video.g, ...), empty when absent."""
    return feature.get("info") or {}


def feature_frame_size(feature: Mapping[str, Any]) -> tuple[int, int] | None:
    """(height, width) of a camera feature from its info.json shape and names (lerobot: [height, width,
    channels]); None when the shape is not a frame's."""
    shape, names = list(feature.get("shape") or []), feature.get("names")
    if len(shape) != 3:
        return None
    if isinstance(names, list) and "height" in names and "width" in names:
        return int(shape[names.index("height")]), int(shape[names.index("width")])
    channels_first = shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4)
    return (int(shape[1]), int(shape[2])) if channels_first else (int(shape[0]), int(shape[1]))


def check_version(version: Any, source: str) -> None:
    """Accept v3.x; point v2.x users at conversion; reject anything else by name."""
    if isinstance(version, str) and version.startswith("v3."):
        return
    if isinstance(version, str) and version.startswith(("v2.", "v1.")):
        raise UnsupportedVersionError(
            f"{source}: codebase_version {version!r} is the per-episode-file layout; robostream reads v3.0: "
            + CONVERT_HINT
        )
    raise UnsupportedVersionError(f"{source}: unknown codebase_version {version!r}; expected 'v3.0'")


def check_feature(name: Any, feature: Any, source: str) -> None:
    """A feature entry of info.json: a printable key, a dtype string and a shape of positive ints."""
    if not isinstance(name, str) or not name or not name.isprintable():
        raise DatasetFormatError(
            f"{source}: feature key {name!r} must be a non-empty string without control "
            "characters (NUL, newline, ...); rename the feature"
        )
    if not isinstance(feature, dict) or not isinstance(feature.get("dtype"), str) or "shape" not in feature:
        raise DatasetFormatError(f"{source}: feature {name!r} needs a 'dtype' string and a 'shape', got {feature!r}")
    if feature["dtype"] == "video" and "/" in name:
        raise DatasetFormatError(
            f"{source}: camera key {name!r} contains '/'; a camera's key names the folder of its "
            "videos: rename the feature"
        )
    if feature["dtype"] == LANGUAGE_DTYPE:
        check_language_feature(name, source)
    if is_depth_feature(feature):
        if feature["dtype"] != "video":
            raise DatasetFormatError(
                f"{source}: feature {name!r} is a depth map stored as {feature['dtype']!r}; "
                "robostream reads depth cameras stored as video (lerobot's default, "
                "use_videos=True): re-write the dataset with videos"
            )
        depth_coding(feature, key=name, source=source)
    if feature["dtype"] not in CAMERA_OR_TEXT_DTYPES:
        try:
            np.dtype(feature["dtype"])
        except TypeError:
            raise DatasetFormatError(
                f"{source}: feature {name!r} has dtype {feature['dtype']!r}, neither a numeric "
                f"dtype nor one of {CAMERA_OR_TEXT_DTYPES}; fix the feature"
            ) from None
    shape = feature["shape"]
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
    ):
        raise DatasetFormatError(
            f"{source}: feature {name!r} 'shape' must be a list of positive integers, got {shape!r}"
        )


def parse_info(doc: Any, source: str) -> DatasetInfo:
    """Build a DatasetInfo from a parsed info.json, naming `source` and the key in every error."""
    if not isinstance(doc, dict):
        raise DatasetFormatError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    check_version(doc.get("codebase_version"), source)

    def required(key: str) -> Any:
        if key not in doc:
            raise DatasetFormatError(f"{source}: required key {key!r} is missing")
        return doc[key]

    fps = finite_number(required("fps"), what=f"{source} 'fps'", positive=True, error=DatasetFormatError)
    features = required("features")
    if not isinstance(features, dict) or not features:
        raise DatasetFormatError(f"{source}: 'features' must be a non-empty object")
    for name, feat in features.items():
        check_feature(name, feat, source)

    def count(key: str, default: int, *, positive: bool = False) -> int:
        return int(
            finite_number(
                doc.get(key, default),
                what=f"{source} {key!r}",
                integer=True,
                minimum=0,
                positive=positive,
                error=DatasetFormatError,
            )
        )

    def megabytes(key: str, default: float) -> float:
        return float(
            finite_number(doc.get(key, default), what=f"{source} {key!r}", positive=True, error=DatasetFormatError)
        )

    data_path = check_relative(doc.get("data_path") or DEFAULT_DATA_PATH, what=f"{source} data_path")
    has_video = any(f.get("dtype") == "video" for f in features.values())
    video_path = doc.get("video_path")
    if video_path is None and has_video:
        video_path = DEFAULT_VIDEO_PATH
    if video_path is not None:
        video_path = check_relative(video_path, what=f"{source} video_path")
    return DatasetInfo(
        codebase_version=doc["codebase_version"],
        fps=int(round(fps)) if float(fps).is_integer() else fps,
        features=features,
        total_episodes=count("total_episodes", 0),
        total_frames=count("total_frames", 0),
        total_tasks=count("total_tasks", 0),
        chunks_size=count("chunks_size", DEFAULT_CHUNKS_SIZE, positive=True),
        data_files_size_in_mb=megabytes("data_files_size_in_mb", DEFAULT_DATA_FILE_MB),
        video_files_size_in_mb=megabytes("video_files_size_in_mb", DEFAULT_VIDEO_FILE_MB),
        data_path=data_path,
        video_path=video_path,
        robot_type=doc.get("robot_type"),
        splits=dict(doc.get("splits") or {}),
        raw=doc,
    )


def loads_info(text: str, source: str) -> DatasetInfo:
    """Parse info.json text; malformed JSON is reported with the file, line and column."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(
            f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    return parse_info(doc, source)


def chunks_size_of(text: str, source: str) -> int:
    """info.json's chunks_size alone, without checking the rest: where the episodes files are probed, every warm
    construction of a plain-HTTP source (the snapshot parses the whole file once). A value loads_info would refuse
    is refused by it, with its error."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    size = doc.get("chunks_size", DEFAULT_CHUNKS_SIZE) if isinstance(doc, dict) else None
    if type(size) is int and size > 0:
        return size
    return loads_info(text, source).chunks_size
