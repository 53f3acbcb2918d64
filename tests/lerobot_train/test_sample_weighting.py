"""`--sample_weighting.*` in `robostream train` (issue 36): lerobot's weighter (RA-BC over `sarm_progress.parquet`)
and lerobot's weighted loss, the progress file read through robostream's storage (local and over HTTP), each source
of a mixture weighed by its own file.

lerobot's weighted loss asks the policy for per-sample losses (`forward(batch, reduction="none")`); the policies
that give them (pi0, pi05, smolvla, ...) need a VLM's weights, so the tests give ACT a per-sample loss
(scripts/per_sample_act.py: its L1 term per sample). The comparison with lerobot runs as a reference script; the
training run is conftest's weighted_eval_mixture (a sample-weighted mixture with an eval split, killed and resumed).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from robostream.synth import generate
from robostream.testing.slow_store import RangeHTTPServer
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.harness import ACT, COMMON, EIGHT, read_record, run_script, write_progress

pytestmark = pytest.mark.timeout(2 * SUBPROCESS_TIMEOUT_S + 60)
DATASET = dataclasses.replace(EIGHT, episodes=4, episode_length=12, seed=11)
WEIGHTED = [*ACT, *COMMON, "--sample_weighting.type=rabc", "--batch_size=8", "--num_workers=0"]


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
        got = run_script(lerobot_python, hf_home, "weighting_compare.py", json.dumps(cases))
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
    assert "--reward_model.type=sarm is not supported here: SARM's targets" in errors["reward_model"]


def test_a_weighted_mixture_trains_and_logs_the_weights(weighted_eval_mixture):
    """A streaming 2-source mixture (one over HTTP), each with its progress file, killed and resumed
    (conftest's weighted_eval_mixture): the resumed run logs the weighter's stats at its start and lerobot's
    per-step `sample_weight_*` metrics for each step it trains (3 to 6)."""
    log = weighted_eval_mixture.resumed_log
    assert "sample weighting: {'source_0/type': 'rabc'" in log, log[-3000:]
    steps = [line for line in log.splitlines() if "sample_weight_mean_weight:" in line]
    assert len(steps) == 4, log[-3000:]
    assert all("sample_weight_num_zero_weight:" in line for line in steps)
    record = read_record(Path(f"{weighted_eval_mixture.out}.jsonl"))
    assert [r["step"] for r in record][-4:] == [3, 4, 5, 6], "the resumed run's steps"
    assert {s for r in record for s in r["dataset_index"]} == {0, 1}
