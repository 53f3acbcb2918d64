"""What lerobot-eval loads from a `robostream train` checkpoint: the policy (from_pretrained) and the saved
processors, then an action for a sample that lerobot's own LeRobotDataset reads. Prints its shape and whether it is
finite, as one JSON line.

    python lerobot_loads_checkpoint.py PRETRAINED_MODEL_DIR DATASET_ROOT
"""

import json
import sys

import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.policies.factory import get_policy_class, make_pre_post_processors

path, root = sys.argv[1], sys.argv[2]
cfg = PreTrainedConfig.from_pretrained(path)
policy = get_policy_class(cfg.type).from_pretrained(path).eval()
pre, post = make_pre_post_processors(cfg, pretrained_path=path)
sample = LeRobotDataset("local/tiny", root=root)[5]
batch = {k: v.unsqueeze(0) if isinstance(v, torch.Tensor) else [v] for k, v in sample.items()}
with torch.no_grad():
    action = post(policy.select_action(pre(batch)))
print(json.dumps({"shape": list(action.shape), "finite": bool(torch.isfinite(action).all())}))
