"""robostream's eval split (the function `robostream train` uses, over robostream's metadata) and lerobot's
make_train_eval_datasets on the same dataset, for each case (a JSON object: name -> [eval_split, episodes or null]):
both splits as one JSON line.

    python lerobots_split.py ROOT CASES_JSON
"""

import json
import sys

from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig
from lerobot.datasets.factory import make_train_eval_datasets
from lerobot.policies.act.configuration_act import ACTConfig

from robostream.format.metadata import load_metadata
from robostream.lerobot.eval_split import first_tasks, split_episodes

root, cases = sys.argv[1], json.loads(sys.argv[2])
meta = load_metadata(root)
tasks = first_tasks(meta)
all_episodes = [int(e) for e in meta.episodes.episode_index]
results = {}
for name, (eval_split, episodes) in cases.items():
    dataset = DatasetConfig(repo_id="local/a", root=root, eval_split=eval_split, episodes=episodes)
    train, held_out = make_train_eval_datasets(TrainPipelineConfig(dataset=dataset, policy=ACTConfig(device="cpu")))
    ours = split_episodes(episodes=episodes or all_episodes, first_tasks=tasks, eval_split=eval_split, where=root)
    results[name] = {"lerobot": [sorted(train.episodes), sorted(held_out.episodes)], "robostream": ours}
print(json.dumps(results))
