"""Exception types. Every message names the file, key or value at fault and what to do about it."""

from __future__ import annotations


class RobostreamError(Exception):
    """Base class of all robostream errors."""


class DatasetFormatError(RobostreamError, ValueError):
    """A dataset file is missing, malformed or inconsistent with the LeRobot format."""


class UnsupportedVersionError(DatasetFormatError):
    """The dataset uses a codebase version this reader cannot read (e.g. v2.1 needs conversion first)."""


class UnsafePathError(DatasetFormatError):
    """A path template or value would escape the dataset root (absolute path or '..')."""


class MissingFileError(DatasetFormatError, FileNotFoundError):
    """A file the metadata points to does not exist."""


class VideoDecodeError(RobostreamError, RuntimeError):
    """A video file could not be opened or decoded."""


class FrameToleranceError(VideoDecodeError):
    """No decoded frame lies within `tolerance_s` of a requested timestamp."""
