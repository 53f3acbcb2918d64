"""The reward-model runs `robostream train` refuses, each message as the command gives it (prints one JSON line):
SARM, a zero-shot model, PEFT, an env (refuse_unsupported, from the parsed flags); a dataset without `next.reward`,
cameras that disagree with --reward_model.num_cameras, no input features (make_reward_model, before the encoder is
loaded).

    python reward_refusals.py DATASET_ROOT
"""

import json
import sys
import types

import draccus

from robostream.datasets.map_style import LeRobotDataset
from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.reward_model import check_inputs, make_reward_model
from robostream.lerobot.train import refuse_unsupported

CAMERA = '--reward_model.input_features={"observation.images.cam0": {"type": "VISUAL", "shape": [3, 64, 64]}}'


def error(call, *args):
    try:
        call(*args)
    except ValueError as exc:
        return str(exc)
    return None


def config(*flags):
    return draccus.parse(RobostreamTrainConfig, args=["--dataset.repo_id=x", "--reward_model.device=cpu", *flags])


classifier = ["--reward_model.type=reward_classifier", "--reward_model.num_cameras=1", CAMERA]
meta = LeRobotDataset(repo_id="local/x", root=sys.argv[1]).meta
errors = {
    "sarm": error(refuse_unsupported, config("--reward_model.type=sarm")),
    "peft": error(refuse_unsupported, config(*classifier, "--peft.method_type=LORA")),
    "env": error(refuse_unsupported, config(*classifier, "--env.type=pusht")),
    "zero_shot": error(
        lambda: make_reward_model(config=config("--reward_model.type=topreward").reward_model, meta=meta)
    ),
    "no_features": error(
        lambda: make_reward_model(config=config("--reward_model.type=reward_classifier").reward_model, meta=meta)
    ),
    "no_reward": error(
        lambda: check_inputs(
            config=config(*classifier).reward_model,
            meta=types.SimpleNamespace(features={k: f for k, f in meta.features.items() if k != "next.reward"}),
        )
    ),
    "cameras": error(
        lambda: make_reward_model(config=config(*classifier, "--reward_model.num_cameras=2").reward_model, meta=meta)
    ),
}
print(json.dumps(errors))
