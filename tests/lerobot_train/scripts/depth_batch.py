"""The first batch of a saved `robostream train` configuration's data, through the command's to_device and the
saved run's preprocessor: the depth camera's dtype, shape, range and whether it holds whole values, and the policy's
inputs, as one JSON line.

    python depth_batch.py PRETRAINED_MODEL_DIR DEPTH_KEY
"""

import json
import sys

import torch
from lerobot.policies import make_policy

from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.data import make_training_data
from robostream.lerobot.train import make_processors, to_device

cfg = RobostreamTrainConfig.from_pretrained(sys.argv[1])
cfg.num_workers = 0  # read here: this interpreter runs other scripts (no fork of it); the batch is the same
data = make_training_data(cfg, device=torch.device("cpu"), policy_config=cfg.policy)
policy = make_policy(cfg=cfg.policy, ds_meta=data.meta)
pre, _ = make_processors(cfg, policy, data.meta.stats, torch.device("cpu"))
batch = pre(to_device(next(iter(data.loader)), data.meta.camera_keys, torch.device("cpu"), None, 0))
depth = batch[sys.argv[2]]
summary = {
    "dtype": str(depth.dtype),
    "shape": list(depth.shape),
    "min": depth.min().item(),
    "max": depth.max().item(),
    "whole": bool(torch.equal(depth, depth.round())),
    "inputs": sorted(policy.config.input_features),
}
print(json.dumps(summary))
