"""`--dataset.eval_split` in `robostream train` (issue 36): lerobot's held-out episodes, the eval loss every
`--eval_steps` logged as lerobot-train logs it, the held-out episodes never trained on (read from what the training
loop consumed: `--robostream.record`), the split recorded in the checkpoint and the same after SIGKILL + resume.

Datasets (synth: episode e does task e % 4, episode 4 starts with task 0): 8 episodes hold out [4, 5, 6, 7] at
eval_split=0.25 (the last of each task's two), 6 episodes hold out [2, 3, 4, 5] (tasks 2 and 3 have one episode
each: ceil(1 x 0.25) = 1 holds it out).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from robostream.synth import SynthConfig, generate
from tests.helpers import dataset_indices
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.test_train_command import (
    ACT,
    COMMON,
    command_env,
    read_record,
    resume,
    train,
    train_until_killed,
)

pytestmark = pytest.mark.timeout(4 * SUBPROCESS_TIMEOUT_S + 60)
EIGHT = SynthConfig(
    episodes=8,
    cameras=1,
    height=48,
    width=64,
    fps=20,
    episode_length=8,
    state_dim=6,
    data_file_mb=0.005,
    video_file_mb=0.02,
    seed=5,
)
SIX = dataclasses.replace(EIGHT, episodes=6, seed=6)
HELD_OUT_EIGHT, HELD_OUT_SIX = [4, 5, 6, 7], [2, 3, 4, 5]
EVAL = ["--dataset.eval_split=0.25", "--eval_steps=2", "--batch_size=8", "--num_workers=0", "--save_freq=2"]
EVAL_LOSS = re.compile(r"step (\d+): eval_loss=(\d+\.\d{4})$", re.MULTILINE)


@pytest.fixture(scope="module")
def eight(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("eight") / "ds", EIGHT, jobs=1)


@pytest.fixture(scope="module")
def six(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("six") / "ds", SIX, jobs=1)


def run_args(out: Path, steps: int, *extra: str) -> list[str]:
    return [*ACT, *COMMON, *EVAL, f"--output_dir={out}", f"--robostream.record={out}.jsonl", f"--steps={steps}", *extra]


def held_out_recorded(out: Path, step: int) -> list[list[int]] | None:
    return json.loads((out / "checkpoints" / f"{step:06d}" / "training_state" / "robostream_data.json").read_text())[
        "held_out"
    ]


def trained_indices(record: Path, source: int = 0) -> set[int]:
    """The `index` of every sample of `source` the training loop consumed."""
    return {
        i
        for r in read_record(record)
        for k, i in enumerate(r["index"])
        if r.get("dataset_index", [0] * len(r["index"]))[k] == source
    }


def assert_eval_logged(stderr: str, steps: list[int]) -> None:
    found = EVAL_LOSS.findall(stderr)
    assert [int(s) for s, _ in found] == steps, stderr[-3000:]
    assert all(float(loss) > 0 for _, loss in found)


def test_mixture_holds_out_each_sources_episodes_and_resumes_with_them(lerobot_python, hf_home, eight, six, tmp_path):
    """A streaming 2-source mixture, killed after step 3 (checkpoint 2) and resumed to step 6: eval loss at 4 and 6
    after the resume, no held-out sample trained on (before or after the kill), the split of each source recorded
    and the same after the resume."""
    out = tmp_path / "mix"
    args = run_args(
        out,
        6,
        "--dataset.streaming=true",
        "--dataset.repo_id=[local/a,local/b]",
        f"--dataset.root=[{eight},{six}]",
        "--robostream.weights=[0.7,0.3]",
        "--max_eval_samples=12",
    )
    train_until_killed(lerobot_python, hf_home, args, Path(f"{out}.jsonl"), after_steps=3)
    assert held_out_recorded(out, 2) == [HELD_OUT_EIGHT, HELD_OUT_SIX]
    stderr = train(lerobot_python, hf_home, resume(out))
    assert_eval_logged(stderr, [4, 6])
    assert held_out_recorded(out, 6) == [HELD_OUT_EIGHT, HELD_OUT_SIX]
    for source, (root, held_out) in enumerate([(eight, HELD_OUT_EIGHT), (six, HELD_OUT_SIX)]):
        trained = trained_indices(Path(f"{out}.jsonl"), source)
        assert trained and not trained & set(dataset_indices(root, held_out)), f"source {source}"


def test_map_style_holds_out_lerobots_episodes_and_refuses_another_split_on_resume(
    lerobot_python, hf_home, eight, tmp_path
):
    """Map-style (lerobot's sampler, eval loader with --max_eval_samples' per-task subset): the held-out frames
    never trained on, the split recorded; resumed over other episodes (their split differs): refused naming both
    splits, before anything is trained. (SIGKILL + resume with the recorded split: the mixture's test; both modes
    check it in one place, robostream.lerobot.train.)"""
    out = tmp_path / "map"
    args = run_args(out, 4, "--dataset.repo_id=local/a", f"--dataset.root={eight}", "--max_eval_samples=4")
    stderr = train(lerobot_python, hf_home, args)
    assert_eval_logged(stderr, [2, 4])
    assert held_out_recorded(out, 2) == held_out_recorded(out, 4) == [HELD_OUT_EIGHT]
    trained = trained_indices(Path(f"{out}.jsonl"))
    assert trained and not trained & set(dataset_indices(eight, HELD_OUT_EIGHT))

    proc = subprocess.run(
        [lerobot_python, "-m", "robostream.lerobot.train", *resume(out), "--dataset.episodes=[0,1,2,3,4,5,6]"],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode != 0
    assert "was trained with held-out episodes source 0: [4, 5, 6, 7], but this run's" in proc.stderr
    assert "--dataset.eval_split=0.25 over its data holds out source 0: [3, 4, 5, 6]" in proc.stderr, proc.stderr[
        -3000:
    ]


LEROBOTS_SPLIT = r"""
import json, sys
from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig
from lerobot.datasets.factory import make_train_eval_datasets
from lerobot.policies.act.configuration_act import ACTConfig
from robostream.format.metadata import load_metadata
from robostream.lerobot.eval_split import first_tasks, split_episodes
root, cases = sys.argv[1], json.loads(sys.argv[2])
tasks = first_tasks(load_metadata(root))
results = {}
for name, (eval_split, episodes) in cases.items():
    dataset = DatasetConfig(repo_id="local/a", root=root, eval_split=eval_split, episodes=episodes)
    train, held_out = make_train_eval_datasets(TrainPipelineConfig(dataset=dataset, policy=ACTConfig(device="cpu")))
    ours = split_episodes(episodes=episodes or list(range(8)), first_tasks=tasks, eval_split=eval_split, where=root)
    results[name] = {"lerobot": [sorted(train.episodes), sorted(held_out.episodes)], "robostream": ours}
print(json.dumps(results))
"""


def test_the_held_out_episodes_are_lerobots(lerobot_python, hf_home, eight):
    """robostream's split (the function `robostream train` uses, over robostream's metadata) against lerobot's
    make_train_eval_datasets on the same dataset: all episodes, and a selection in another order (lerobot groups
    the episodes by task in the order they are selected)."""
    cases = {"all": [0.34, None], "selection": [0.5, [7, 2, 5, 0, 1, 4, 6]]}
    proc = subprocess.run(
        [lerobot_python, "-c", LEROBOTS_SPLIT, str(eight), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, split in got.items():
        assert split["robostream"] == split["lerobot"], name
    assert got["all"]["lerobot"][1] == HELD_OUT_EIGHT
    assert got["selection"]["lerobot"][1] == [1, 4, 6, 7]
