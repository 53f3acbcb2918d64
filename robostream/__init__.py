"""robostream: fast, exact, resumable loading of LeRobot-format robot datasets into PyTorch.

The public classes are imported on first use (PEP 562), so tools that need no torch (`robostream convert`, its
worker processes, `robostream verify`) start without importing it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DecodeOptions": "robostream.video.options",
    "LeRobotDataset": "robostream.datasets.map_style",
    "LookAheadBatchSampler": "robostream.datasets.look_ahead_sampler",
    "Mixture": "robostream.datasets.mixture",
    "Source": "robostream.datasets.mixture",
    "ReadOptions": "robostream.storage.options",
    "StreamOptions": "robostream.datasets.stream_options",
    "StreamingDataLoader": "robostream.datasets.loader",
    "StreamingLeRobotDataset": "robostream.datasets.streaming",
    "VideoDecoderCache": "robostream.video.cache",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'robostream' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
