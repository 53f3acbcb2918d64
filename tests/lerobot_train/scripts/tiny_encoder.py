"""A tiny ResNet encoder for the reward classifier, saved as transformers saves one (`save_pretrained`), so that
`--reward_model.model_name=FOLDER` loads it offline with AutoModel: 3 stages of 8 channels, so 64x64 frames give
the 4x4 feature map the classifier's spatial embedding takes (lerobot/resnet10 gives it from 128x128). Prints one
JSON line.

    python tiny_encoder.py FOLDER
"""

import json
import sys

import torch
from transformers import ResNetConfig, ResNetModel

torch.manual_seed(0)
config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 8, 8], depths=[1, 1, 1], layer_type="basic")
ResNetModel(config).save_pretrained(sys.argv[1])
print(json.dumps({"saved": sys.argv[1], "hidden_sizes": config.hidden_sizes}))
