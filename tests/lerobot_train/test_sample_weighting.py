"""`--sample_weighting.*` in `robostream train` (issue 36): lerobot's weighter (RA-BC over `sarm_progress.parquet`)
and lerobot's weighted loss, the progress file read through robostream's storage (local and over HTTP), each source
of a mixture weighed by its own file.

lerobot's weighted loss asks the policy for per-sample losses (`forward(batch, reduction="none")`); the policies
that give them (pi0, pi05, smolvla, ...) need a VLM's weights, so the tests give ACT a per-sample loss
(PER_SAMPLE_ACT: its L1 term per sample). Two launches: the comparison with lerobot (in one process), and a short
training run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from robostream.synth import SynthConfig, generate
from robostream.testing.slow_store import RangeHTTPServer
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.test_train_command import ACT, COMMON, command_env

pytestmark = pytest.mark.timeout(2 * SUBPROCESS_TIMEOUT_S + 60)
DATASET = SynthConfig(
    episodes=4,
    cameras=1,
    height=48,
    width=64,
    fps=20,
    episode_length=12,
    state_dim=6,
    data_file_mb=0.005,
    video_file_mb=0.02,
    seed=11,
)
WEIGHTED = [*ACT, *COMMON, "--sample_weighting.type=rabc", "--batch_size=8", "--num_workers=0"]

PER_SAMPLE_ACT = r"""
import torch.nn.functional as F
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.utils.constants import ACTION, OBS_IMAGES

lerobots_forward = ACTPolicy.forward


def per_sample_forward(self, batch, reduction="mean"):
    if reduction == "mean":
        return lerobots_forward(self, batch)
    batch = dict(batch)
    batch[OBS_IMAGES] = [batch[key] for key in self.config.image_features]
    actions_hat, _ = self.model(batch)
    valid = ~batch["action_is_pad"].unsqueeze(-1)
    return (F.l1_loss(batch[ACTION], actions_hat, reduction="none") * valid).flatten(1).mean(1), {}


ACTPolicy.forward = per_sample_forward
"""

COMPARE = (
    PER_SAMPLE_ACT
    + r"""
import copy, json, sys, types
import draccus, torch
from accelerate import Accelerator
from lerobot.optim.factory import make_optimizer_and_scheduler
from lerobot.policies import make_policy
from lerobot.scripts.lerobot_train import update_policy
from lerobot.utils.logging_utils import AverageMeter, MetricsTracker
from lerobot.utils.sample_weighting import make_sample_weighter
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


# lerobot's update_policy on one batch from the same policy state: our weights (our storage, the loader's batch)
# against lerobot's weighter over the same file and the preprocessed batch, and no weighting at all.
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
    update_policy(tracker, trained, batch, optimizer, 10.0, accelerator=Accelerator(cpu=True), sample_weighter=weighter)
    losses[name] = tracker.loss.val
results.update(losses=losses, weights=weights, stats=ours.get_stats(), lerobot_stats=lerobots.get_stats())

# a mixture (one source local, one over HTTP): each sample weighed by its source's own file, as lerobot's weighter
# of that source weighs the source's samples of the batch
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
    check_per_sample_loss(types.SimpleNamespace(forward=lerobots_forward.__get__(policy)), cfg.sample_weighting)
except ValueError as exc:
    errors["no_per_sample_loss"] = str(exc)
try:
    refuse_unsupported(draccus.parse(RobostreamTrainConfig, args=["--reward_model.type=sarm", "--dataset.repo_id=x"]))
except ValueError as exc:
    errors["reward_model"] = str(exc)
results["errors"] = errors
print(json.dumps(results))
"""
)

RUN = (
    PER_SAMPLE_ACT
    + r"""
import sys
from robostream.lerobot.train import main

sys.argv = ["robostream train", *sys.argv[1:]]
main()
"""
)


def write_progress(root: Path) -> None:
    """sarm_progress.parquet as lerobot's compute_rabc_weights writes it (index, episode_index, frame_index,
    progress_sparse): episodes 0 and 2 progress, 1 goes backwards (weight 0), 3 stalls (RA-BC's soft weights)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from robostream.format.metadata import load_metadata

    table = load_metadata(root).episodes
    rows: dict[str, list] = {"index": [], "episode_index": [], "frame_index": [], "progress_sparse": []}
    for episode in table.episode_index.tolist():
        start, end = int(table.from_index[table.row_of(episode)]), int(table.to_index[table.row_of(episode)])
        for frame, index in enumerate(range(start, end)):
            share = frame / (end - start - 1)
            progress = {0: share, 1: 1 - share, 2: share**2, 3: 0.5 + 0.001 * frame}[episode % 4]
            rows["index"].append(index)
            rows["episode_index"].append(episode)
            rows["frame_index"].append(frame)
            rows["progress_sparse"].append(progress)
    pq.write_table(pa.table(rows), root / "sarm_progress.parquet")


@pytest.fixture(scope="module")
def roots(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two datasets with progress files, and a copy of the first without."""
    base = tmp_path_factory.mktemp("weighting")
    first = generate(base / "first", DATASET, jobs=1)
    second = generate(base / "second", dataclasses.replace(DATASET, seed=12), jobs=1)
    unweighted = shutil.copytree(first, base / "unweighted")
    for root in (first, second):
        write_progress(root)
    return {"first": first, "second": second, "unweighted": unweighted}


def run(python: str, hf_home: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**command_env(hf_home), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    return subprocess.run(
        [python, "-c", script, *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env
    )


def mixture_args(first: Path, second_url: str) -> list[str]:
    return ["--dataset.streaming=true", "--dataset.repo_id=[local/a,local/b]", f"--dataset.root=[{first},{second_url}]"]


def test_weighted_loss_is_lerobots_and_a_mixture_weighs_each_source_by_its_own_file(lerobot_python, hf_home, roots):
    """One batch through lerobot's update_policy from the same policy state: our weights (our reader of the
    progress file, the loader's `index`) give lerobot's weights and loss, unlike no weighting; a mixture with a
    source over HTTP: each source's samples weighted as lerobot's weighter of that source weighs them; a missing
    file, a policy without per-sample losses and reward-model training refused naming why."""
    first, second = roots["first"], roots["second"]
    with RangeHTTPServer(second) as server:
        cases = {
            "root": str(first),
            "single": [*WEIGHTED, "--dataset.repo_id=local/a", f"--dataset.root={first}"],
            "mixture": [*WEIGHTED, *mixture_args(first, server.url)],
            "mixture_roots": [str(first), str(second)],
            "missing": [*WEIGHTED, "--dataset.repo_id=local/a", f"--dataset.root={roots['unweighted']}"],
        }
        proc = run(lerobot_python, hf_home, COMPARE, json.dumps(cases))
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    losses = got["losses"]
    assert losses["robostream"] == losses["lerobot"], losses
    assert losses["robostream"] != pytest.approx(losses["unweighted"]), losses
    assert got["weights"]["robostream"] == got["weights"]["lerobot"]
    assert len(set(got["weights"]["robostream"])) > 1  # RA-BC weighs these samples differently
    assert got["stats"] == got["lerobot_stats"] and got["stats"]["type"] == "rabc"

    mixture = got["mixture"]
    assert mixture["sources"] == [0, 1] and mixture["equal"], mixture
    assert mixture["sum"] == pytest.approx(8, abs=1e-3)
    assert mixture["batch_stats"] == ["mean_weight", "num_full_weight", "num_zero_weight"]
    assert "source_0/delta_mean" in mixture["stats"] and "source_1/delta_mean" in mixture["stats"]

    errors = got["errors"]
    assert f"{roots['unweighted'] / 'sarm_progress.parquet'} not found" in errors["missing"], errors
    assert "compute_rabc_weights" in errors["missing"]
    assert "has no `reduction`" in errors["no_per_sample_loss"], errors
    assert "--reward_model.* (reward-model training) is not supported here: SARM's targets" in errors["reward_model"]


def test_a_weighted_mixture_trains_and_logs_the_weights(lerobot_python, hf_home, roots, tmp_path):
    """A short streaming run over a 2-source mixture (one over HTTP), each with its progress file: it trains,
    logs the weighter's stats at the start and lerobot's per-step `sample_weight_*` metrics."""
    with RangeHTTPServer(roots["second"]) as server:
        proc = run(
            lerobot_python,
            hf_home,
            RUN,
            *WEIGHTED,
            *mixture_args(roots["first"], server.url),
            "--steps=2",
            "--save_checkpoint=false",
            f"--output_dir={tmp_path / 'out'}",
        )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "sample weighting: {'source_0/type': 'rabc'" in proc.stderr, proc.stderr[-3000:]
    steps = [line for line in proc.stderr.splitlines() if "sample_weight_mean_weight:" in line]
    assert len(steps) == 2, proc.stderr[-3000:]
    assert all("sample_weight_num_zero_weight:" in line for line in steps)
