"""`--dataset.eval_split` in `robostream train` (issue 36): lerobot's held-out episodes, the eval loss every
`--eval_steps` logged as lerobot-train logs it, the held-out episodes never trained on (read from what the training
loop consumed: `--robostream.record`), the split recorded in the checkpoint and the same after SIGKILL + resume.

Datasets (harness.EIGHT and SIX): 8 episodes hold out [4, 5, 6, 7] at eval_split=0.25, 6 episodes [2, 3, 4, 5].
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import dataset_indices
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.harness import (
    ACT,
    COMMON,
    EVAL,
    HELD_OUT_EIGHT,
    HELD_OUT_SIX,
    read_record,
    resume,
    run_script,
    train,
)

pytestmark = pytest.mark.timeout(4 * SUBPROCESS_TIMEOUT_S + 60)
EVAL_LOSS = re.compile(r"step (\d+): eval_loss=(\d+\.\d{4})$", re.MULTILINE)


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


def test_mixture_holds_out_each_sources_episodes_and_resumes_with_them(weighted_eval_mixture, eight, six):
    """A streaming 2-source mixture (one over HTTP, sample-weighted: conftest's weighted_eval_mixture), killed after
    step 3 (checkpoint 2) and resumed to step 6: eval loss at 4 and 6 after the resume, no held-out sample trained
    on (before or after the kill), the split of each source recorded and the same after the resume."""
    out = weighted_eval_mixture.out
    assert_eval_logged(weighted_eval_mixture.resumed_log, [4, 6])
    assert held_out_recorded(out, 2) == held_out_recorded(out, 6) == [HELD_OUT_EIGHT, HELD_OUT_SIX]
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
    args = [
        *ACT,
        *COMMON,
        *EVAL,
        f"--output_dir={out}",
        f"--robostream.record={out}.jsonl",
        "--steps=4",
        "--dataset.repo_id=local/a",
        f"--dataset.root={eight}",
        "--max_eval_samples=4",
    ]
    stderr = train(lerobot_python, hf_home, args, preimported=True)
    assert_eval_logged(stderr, [2, 4])
    assert held_out_recorded(out, 2) == held_out_recorded(out, 4) == [HELD_OUT_EIGHT]
    trained = trained_indices(Path(f"{out}.jsonl"))
    assert trained and not trained & set(dataset_indices(eight, HELD_OUT_EIGHT))

    other_episodes = {"other_episodes": [*resume(out), "--dataset.episodes=[0,1,2,3,4,5,6]"]}
    refused = run_script(lerobot_python, hf_home, "main_errors.py", json.dumps(other_episodes))["errors"]
    assert "was trained with held-out episodes source 0: [4, 5, 6, 7], but this run's" in refused["other_episodes"]
    assert "--dataset.eval_split=0.25 over its data holds out source 0: [3, 4, 5, 6]" in refused["other_episodes"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["000002", "000004", "last"]


def test_the_held_out_episodes_are_lerobots(lerobot_python, hf_home, eight):
    """robostream's split (the function `robostream train` uses, over robostream's metadata) against lerobot's
    make_train_eval_datasets on the same dataset: all episodes, and a selection in another order (lerobot groups
    the episodes by task in the order they are selected)."""
    cases = {"all": [0.34, None], "selection": [0.5, [7, 2, 5, 0, 1, 4, 6]]}
    got = run_script(lerobot_python, hf_home, "lerobots_split.py", str(eight), json.dumps(cases))
    for name, split in got.items():
        assert split["robostream"] == split["lerobot"], name
    assert got["all"]["lerobot"][1] == HELD_OUT_EIGHT
    assert got["selection"]["lerobot"][1] == [1, 4, 6, 7]
