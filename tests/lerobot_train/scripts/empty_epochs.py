"""The training loop's batches over a dataset whose every epoch is empty for this consumer (rank 0 of 100 of a
49-sample epoch, each given as many samples as the one with the fewest: none), fresh and resumed: the errors, as one
JSON line.

    python empty_epochs.py ROOT
"""

import json
import sys

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.lerobot.checkpoint import Position
from robostream.lerobot.data import TrainingData
from robostream.lerobot.train import batches

dataset = StreamingLeRobotDataset(
    root=sys.argv[1], rank=0, world_size=100, streams=StreamOptions(canonical_streams=1, uneven="drop")
)
data = TrainingData(
    dataset, StreamingDataLoader(dataset, batch_size=4), dataset.meta, {}, sampler=None, device_augment=None
)
errors = {}
for name, resumed in (("fresh", False), ("resumed", True)):
    try:
        next(batches(data, Position(), resumed=resumed))
        errors[name] = "no error"
    except ValueError as exc:
        errors[name] = str(exc)
print(json.dumps(errors))
