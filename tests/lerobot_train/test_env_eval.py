"""`robostream train --env.type=pusht`: evaluation in the simulation env during training, as lerobot-train does it.

Opt-in like the other lerobot tests (ROBOSTREAM_LEROBOT_PYTHON names lerobot 0.6.1's interpreter, with gym-pusht:
scripts/setup_lerobot.sh installs it). The dataset is pusht-shaped (one 96x96 camera read as `observation.image`
through a source's feature_map, a 2-D state and action, as PushT gives the policy) and the policy a tiny diffusion
one sampled in 2 denoising steps, whose sampling draws from the global random state. Two launches: run A evaluates
every 2 steps of 5 (2 episodes in 2 sync envs of 10 steps each); run B trains the same without the env. A evaluates
after steps 2 and 4 alone, logs lerobot-train's lines with its metrics and writes the episodes' videos where
lerobot-train writes them; A's training is B's (the same samples and losses each step, the same data position and
weights in the last checkpoint): evaluating moves neither the data nor the random state training draws from.
The refusals (an async env made by gym id, FSDP) run in the kept lerobot interpreter.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import textwrap
from pathlib import Path

import pytest

from robostream.synth import generate
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_env import run as run_in_kept_interpreter
from tests.lerobot_train.harness import (
    COMMON,
    DIFFUSION,
    EIGHT,
    LEROBOT_ENV,
    WEIGHTS,
    read_record,
    tensor_bytes,
    train,
)

pytestmark = pytest.mark.timeout(2 * SUBPROCESS_TIMEOUT_S + 60)
# PushT's observations: `pixels` (96x96 RGB) -> observation.image, `agent_pos` (2) -> observation.state; action (2)
PUSHT_LIKE = dataclasses.replace(EIGHT, episodes=4, height=96, width=96, fps=10, episode_length=12, state_dim=2)
ENV_EVAL = [
    "--env.type=pusht",
    "--env.episode_length=10",
    "--env_eval_freq=2",
    "--eval.n_episodes=2",
    "--eval.batch_size=2",
    "--eval.use_async_envs=false",
]
STEPS, EVAL_STEPS = 5, [2, 4]


@pytest.fixture(scope="module")
def pusht_mixture(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-source mixture file naming the synthetic camera as PushT's `observation.image`."""
    tmp = tmp_path_factory.mktemp("pusht_like")
    root = generate(tmp / "ds", PUSHT_LIKE)
    mixture = tmp / "mixture.json"
    mixture.write_text(
        json.dumps(
            [
                {
                    "root": str(root),
                    "repo_id": "local/pusht_like",
                    "feature_map": {"observation.images.cam0": "observation.image"},
                }
            ]
        )
    )
    return mixture


def run_args(mixture: Path, out: Path, *extra: str) -> list[str]:
    return [
        *DIFFUSION,
        "--policy.num_inference_steps=2",
        *COMMON,
        "--dataset.repo_id=local/pusht_like",
        "--dataset.streaming=true",
        f"--robostream.mixture={mixture}",
        "--batch_size=4",
        "--num_workers=0",
        f"--output_dir={out}",
        f"--robostream.record={out}.jsonl",
        f"--steps={STEPS}",
        "--save_freq=4",
        *extra,
    ]


def test_env_eval_at_lerobots_steps_leaves_training_unchanged(
    lerobot_python: str, hf_home: Path, pusht_mixture: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    log = train(lerobot_python, hf_home, run_args(pusht_mixture, a, *ENV_EVAL), preimported=True)
    train(lerobot_python, hf_home, run_args(pusht_mixture, b), preimported=True)

    # lerobot-train's lines, after the step's metrics line: `Eval policy at step N`, then each suite's aggregate
    events = re.findall(r"(step:(\d+) smpl|Eval policy at step (\d+)|Suite (\w+) aggregated: (.*))", log)
    order = [("train", int(m[1])) if m[1] else ("eval", int(m[2])) if m[2] else (m[3], m[4]) for m in events]
    evaluated = [step for kind, step in order if kind == "eval"]
    assert evaluated == EVAL_STEPS, log[-4000:]
    for step in EVAL_STEPS:
        at = order.index(("eval", step))
        assert order[at - 1] == ("train", step) and [kind for kind, _ in order[at + 1 : at + 4]] == [
            "per_task",
            "per_group",
            "overall",
        ], order
        overall = ast.literal_eval(order[at + 3][1])
        assert overall["n_episodes"] == 2 and overall["eval_s"] > 0, overall
        assert 0 <= overall["pc_success"] <= 100 and overall["avg_sum_reward"] >= 0, overall
        videos = a / "eval" / f"videos_step_{step:06d}" / "pusht_0"
        assert sorted(overall["video_paths"]) == [str(videos / f"eval_episode_{i}.mp4") for i in range(2)]
        assert all(Path(path).stat().st_size > 0 for path in overall["video_paths"])
    assert sorted(p.name for p in (a / "eval").iterdir()) == [f"videos_step_{s:06d}" for s in EVAL_STEPS]

    # the evaluations changed nothing of the training: samples, losses, data position, weights
    assert read_record(Path(f"{a}.jsonl")) == read_record(Path(f"{b}.jsonl"))
    last = Path("checkpoints") / f"{STEPS:06d}"
    state_a, state_b = (
        json.loads((run / last / "training_state" / "robostream_data.json").read_text()) for run in (a, b)
    )
    assert state_a == state_b
    assert tensor_bytes(a / last / WEIGHTS) == tensor_bytes(b / last / WEIGHTS)


REFUSALS = """
import json, sys, draccus
from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.env_eval import make_env_evaluation

def refusal(args, sharded):
    cfg = draccus.parse(RobostreamTrainConfig, args=["--policy.type=act", "--dataset.repo_id=x", *args])
    try:
        make_env_evaluation(cfg, main=True, sharded=sharded)
    except ValueError as exc:
        return str(exc)
    return None

print(json.dumps({
    "async": refusal(["--env.type=pusht", "--eval.batch_size=2"], False),
    "one_env": refusal(["--env.type=pusht", "--eval.batch_size=1"], False),
    "sync": refusal(["--env.type=pusht", "--eval.batch_size=2", "--eval.use_async_envs=false"], False),
    "sharded": refusal(["--env.type=pusht", "--eval.use_async_envs=false"], True),
}))
"""


def test_env_eval_refusals(lerobot_python: str, hf_home: Path, tmp_path: Path) -> None:
    """Refused before training, naming the flag and the way out: lerobot 0.6.1's async envs made by gym id (pusht
    fails in them), and an env with a sharded policy (the main process alone evaluates)."""
    script = tmp_path / "refusals.py"
    script.write_text(textwrap.dedent(REFUSALS))
    got = json.loads(run_in_kept_interpreter(lerobot_python, hf_home, [str(script)], **LEROBOT_ENV).splitlines()[-1])
    assert "--env.type=pusht with --eval.use_async_envs=true" in got["async"]
    assert "add --eval.use_async_envs=false" in got["async"]
    assert got["one_env"] is None and got["sync"] is None  # one env, or sync envs: lerobot's evaluation works
    assert "--env.* with FSDP is not supported" in got["sharded"]
