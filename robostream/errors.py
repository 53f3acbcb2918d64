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


class EncodeError(RobostreamError, RuntimeError):
    """A video could not be encoded: an encoder that got stuck or died (the message names the episode and camera)."""


class FrameToleranceError(VideoDecodeError):
    """No decoded frame lies within `tolerance_s` of a requested timestamp."""


class CacheError(RobostreamError, OSError):
    """The node's cache folder cannot be used: not writable, or writable by another user (its entries could be
    planted). The message names the folder and how to choose another (ROBOSTREAM_CACHE, ReadOptions(cache_dir=))."""


class IntegrityError(RobostreamError):
    """Fetched bytes are not the file they should be. Never retried by the generic retry loop: the storage layer
    decides (a checksum mismatch is fetched once more, a changed file is not)."""


class ChecksumMismatchError(IntegrityError):
    """A whole downloaded file does not hash to the value its host publishes (validate="full"); `expected` and
    `got` are the two hashes (hex)."""

    def __init__(self, message: str, expected: str = "", got: str = "") -> None:
        super().__init__(message)
        self.expected, self.got = expected, got


class FileChangedError(IntegrityError):
    """A remote file changed (size or ETag) between two reads of one epoch."""


class TooLargeError(IntegrityError):
    """A file or a server's answer holds more bytes than the size first seen, the range asked for or the bound of a
    file read whole; reading stopped there. The message names the file, the size and the bound."""


class IncompatibleVersionsError(RobostreamError, ImportError):
    """Installed packages that do not go together (a torchcodec built for another torch)."""
