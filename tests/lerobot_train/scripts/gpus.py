"""How many GPUs torch sees in lerobot's environment, as one JSON line."""

import json

import torch

print(json.dumps({"gpus": torch.cuda.device_count()}))
