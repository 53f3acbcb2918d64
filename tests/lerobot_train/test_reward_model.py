"""Reward-model training in `robostream train` (issue 36): lerobot's reward classifier (`--reward_model.type=
reward_classifier`) trained as lerobot-train trains it, over robostream's map-style dataset, offline.

The dataset has a `next.reward` column (synth's `reward`: 1.0 in each episode's last quarter), one 64x64 camera; the
classifier's encoder is a tiny ResNet saved in the test (scripts/tiny_encoder.py) and named by
`--reward_model.model_name=<folder>`, as a user names lerobot/resnet10. Two launches, both forked from the kept interpreter
(launch.py): the first is killed with SIGKILL after step 11, past the checkpoint of step 10; the second resumes
from it to step 20. The steps trained twice (11 and on) must be the same to the last bit: the
same samples, the same losses.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from robostream.synth import generate
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.harness import TINY, read_record, resume, run_script, train, train_until_killed

pytestmark = pytest.mark.timeout(2 * SUBPROCESS_TIMEOUT_S + 60)
DATASET = dataclasses.replace(TINY, cameras=1, state_dim=2, reward=True, seed=9)
# The kill lands between the checkpoints of steps 10 and 20: a step is ~25 ms, the harness polls every 20 ms.
STEPS, SAVE_FREQ, KILL_AFTER = 20, 10, 11


def classifier_args(root: Path, encoder: Path, out: Path) -> list[str]:
    """lerobot's reward classifier, shrunk (one camera, widths 16), on one dataset, map-style (lerobot's sampler)."""
    camera = {"observation.images.cam0": {"type": "VISUAL", "shape": [3, DATASET.height, DATASET.width]}}
    return [
        "--reward_model.type=reward_classifier",
        "--reward_model.device=cpu",
        f"--reward_model.model_name={encoder}",
        f"--reward_model.input_features={json.dumps(camera)}",
        "--reward_model.num_cameras=1",
        "--reward_model.hidden_dim=16",
        "--reward_model.latent_dim=16",
        "--dataset.repo_id=local/reward",
        f"--dataset.root={root}",
        "--seed=3",
        "--log_freq=1",
        "--batch_size=8",
        "--num_workers=0",
        f"--save_freq={SAVE_FREQ}",
        f"--steps={STEPS}",
        f"--output_dir={out}",
        f"--robostream.record={out}.jsonl",
    ]


@pytest.fixture(scope="module")
def reward_run(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run's output folder (killed after step KILL_AFTER, resumed to STEPS) and the resumed launch's log."""
    tmp = tmp_path_factory.mktemp("reward")
    root = generate(tmp / "ds", DATASET, jobs=1)
    run_script(lerobot_python, hf_home, "tiny_encoder.py", str(tmp / "encoder"))
    out = tmp / "run"
    args = classifier_args(root, tmp / "encoder", out)
    train_until_killed(
        lerobot_python, hf_home, args, record=Path(f"{out}.jsonl"), after_steps=KILL_AFTER, preimported=True
    )
    return out, train(lerobot_python, hf_home, resume(out), preimported=True)


def test_reward_classifier_trains_and_resumes_exactly_after_sigkill(reward_run):
    out, log = reward_run
    record = read_record(Path(f"{out}.jsonl"))
    by_step: dict[int, dict] = {}
    for step in record:  # the steps after checkpoint 10 that the killed run trained come again: the same
        assert by_step.setdefault(step["step"], step) == step, f"step {step['step']} differs once resumed"
    assert sorted(by_step) == list(range(1, STEPS + 1))
    assert len(record) > STEPS, "the run was not killed after its checkpoint (no step was trained twice)"
    assert all(math.isfinite(s["loss"][0]) and s["loss"][0] > 0 for s in record)
    assert f"resumed from {out / 'checkpoints' / 'last'} at step {SAVE_FREQ}" in log, log[-3000:]
    assert "reward_classifier: " in log and " loss:" in log and " accuracy:" in log, log[-3000:]

    checkpoint = out / "checkpoints" / f"{STEPS:06d}"
    assert os.readlink(out / "checkpoints" / "last") == checkpoint.name
    model = checkpoint / "pretrained_model"
    for name in ("config.json", "model.safetensors", "train_config.json", "classifier_preprocessor.json"):
        assert (model / name).is_file(), name
    assert json.loads((model / "config.json").read_text())["type"] == "reward_classifier"
    saved = json.loads((model / "train_config.json").read_text())
    assert saved["policy"] is None and saved["reward_model"]["type"] == "reward_classifier"
    for name in ("optimizer_state.safetensors", "rng_state.safetensors", "robostream_data.json"):
        assert (checkpoint / "training_state" / name).is_file(), name


def test_refusals_name_the_flag_and_why(lerobot_python, hf_home, reward_run):
    """SARM, zero-shot models, PEFT, an env; inputs the dataset lacks or that disagree with the flags."""
    root = reward_run[0].parent / "ds"
    errors = run_script(lerobot_python, hf_home, "reward_refusals.py", str(root))
    assert "--reward_model.type=sarm is not supported here: SARM's targets" in errors["sarm"], errors
    assert "--reward_model.type=topreward is a zero-shot reward model" in errors["zero_shot"], errors
    assert "--peft.* with --reward_model.*" in errors["peft"], errors
    assert "--env.* with --reward_model.*" in errors["env"], errors
    assert "--reward_model.input_features: none given" in errors["no_features"], errors
    assert "'next.reward' column" in errors["no_reward"], errors
    assert "--reward_model.num_cameras=2 but --reward_model.input_features names 1 camera" in errors["cameras"], errors
