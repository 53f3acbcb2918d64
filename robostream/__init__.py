"""robostream: fast, exact, resumable loading of LeRobot-format robot datasets into PyTorch."""

from robostream.datasets.loader import StreamingDataLoader
from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.source import SourceOptions
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.video.cache import VideoDecoderCache

__all__ = ["LeRobotDataset", "SourceOptions", "StreamingDataLoader", "StreamingLeRobotDataset",
           "VideoDecoderCache"]
__version__ = "0.1.0"
