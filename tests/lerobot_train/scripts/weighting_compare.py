"""robostream's sample weighting against lerobot's, in one process (a JSON object of cases as the argument; prints
one JSON line):
- one batch through lerobot's update_policy from the same policy state: our weights (our reader of the progress
  file, the loader's batch) against lerobot's weighter over the same file and the preprocessed batch, and no
  weighting at all;
- a mixture (one source local, one over HTTP): each sample weighed by its source's own file, as lerobot's weighter
  of that source weighs the source's samples of the batch;
- the errors: a missing progress file, a policy without per-sample losses, reward-model training.

    python weighting_compare.py CASES_JSON
"""

import copy
import json
import sys
import types

import draccus
import torch
from accelerate import Accelerator
from lerobot.optim.factory import make_optimizer_and_scheduler
from lerobot.policies import make_policy
from lerobot.scripts.lerobot_train import update_policy
from lerobot.utils.logging_utils import AverageMeter, MetricsTracker
from lerobot.utils.sample_weighting import make_sample_weighter
from per_sample_act import LEROBOTS_FORWARD, per_sample_losses

from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.data import make_training_data
from robostream.lerobot.sample_weighting import batch_weights, check_per_sample_loss, make_weighter
from robostream.lerobot.train import make_processors, refuse_unsupported, to_device

cases = json.loads(sys.argv[1])
cpu = torch.device("cpu")
results = {}


def open_run(args):
    cfg = draccus.parse(RobostreamTrainConfig, args=args)
    cfg.validate()
    data = make_training_data(cfg, device=cpu, policy_config=cfg.policy)
    policy = make_policy(cfg=cfg.policy, ds_meta=data.meta)
    return cfg, data, policy


def weighter_of(cfg, data, policy):
    return make_weighter(
        config=cfg.sample_weighting, data=data, policy=policy, device=cpu, read_options=cfg.read_options()
    )


with per_sample_losses():
    cfg, data, policy = open_run(cases["single"])
    ours = weighter_of(cfg, data, policy)
    lerobots = make_sample_weighter(cfg.sample_weighting, policy, cpu, dataset_root=cases["root"])
    preprocessor, _ = make_processors(cfg, policy, data.meta.stats, cpu)
    raw = next(iter(data.loader))
    losses, weights = {}, {}
    for name, weighter in (("robostream", batch_weights(ours, raw)), ("lerobot", lerobots), ("unweighted", None)):
        trained = copy.deepcopy(policy)
        optimizer, _ = make_optimizer_and_scheduler(cfg, trained)
        meters = {name: AverageMeter(name, ":.3f") for name in ("loss", "grad_norm", "lr", "update_s")}
        tracker = MetricsTracker(8, len(data.dataset), 4, meters)
        batch = preprocessor(to_device(dict(raw), data.meta.camera_keys, cpu, None, 0))
        if weighter is not None:
            weights[name] = weighter.compute_batch_weights(batch)[0].tolist()
        torch.manual_seed(0)
        update_policy(
            tracker, trained, batch, optimizer, 10.0, accelerator=Accelerator(cpu=True), sample_weighter=weighter
        )
        losses[name] = tracker.loss.val
    results.update(losses=losses, weights=weights, stats=ours.get_stats(), lerobot_stats=lerobots.get_stats())

    cfg, data, policy = open_run(cases["mixture"])
    ours = weighter_of(cfg, data, policy)
    raw = next(iter(data.loader))
    mixture_weights, batch_stats = ours.compute_batch_weights(raw)
    expected = torch.zeros(len(raw["index"]))
    for source, root in enumerate(cases["mixture_roots"]):
        chosen = raw["dataset_index"] == source
        weighter = make_sample_weighter(cfg.sample_weighting, policy, cpu, dataset_root=root)
        expected[chosen] = weighter.compute_batch_weights({"index": raw["index"][chosen]})[0]
    results["mixture"] = {
        "sources": sorted(set(raw["dataset_index"].tolist())),
        "equal": torch.allclose(mixture_weights, expected),
        "sum": float(mixture_weights.sum()),
        "batch_stats": sorted(batch_stats),
        "stats": sorted(ours.get_stats()),
    }

    errors = {}
    cfg, data, policy = open_run(cases["missing"])
    try:
        weighter_of(cfg, data, policy)
    except FileNotFoundError as exc:
        errors["missing"] = str(exc)
    try:
        check_per_sample_loss(types.SimpleNamespace(forward=LEROBOTS_FORWARD.__get__(policy)), cfg.sample_weighting)
    except ValueError as exc:
        errors["no_per_sample_loss"] = str(exc)
    try:
        refuse_unsupported(
            draccus.parse(RobostreamTrainConfig, args=["--reward_model.type=sarm", "--dataset.repo_id=x"])
        )
    except ValueError as exc:
        errors["reward_model"] = str(exc)
    results["errors"] = errors
print(json.dumps(results))
