"""LeRobot v2.1 -> v3.0 conversion with lerobot 0.6.1's output, in parallel, across machines, resumable.

plan (metadata only: preflight, cut points) -> file tasks (one output file each, leased from a shared work dir,
run by any executor) -> finalize (episodes table, tasks, stats, info; journaled swap). See `convert()` (run.py).
"""

from robostream.convert.executors import EngineOptions
from robostream.convert.finish import finish_conversion
from robostream.convert.run import LEROBOT_VERSION, convert
from robostream.convert.worker import ConversionFailed

__all__ = ["ConversionFailed", "EngineOptions", "LEROBOT_VERSION", "convert", "finish_conversion"]
