"""`python -m robostream.lerobot.train`: lerobot-train's flags over robostream's datasets, exact resume after SIGKILL.

Opt-in like the other lerobot tests (ROBOSTREAM_LEROBOT_PYTHON names an interpreter with lerobot 0.6.1; skipped
otherwise): the command runs there, offline, with robostream from this checkout.

Policies are shrunk to run on 2 CPU cores in seconds (ACT of width 64 with one layer each; a diffusion U-Net of
widths 32/64; ResNet-18 backbones from random init, so nothing is downloaded). Datasets: 4 episodes of ~12 frames
and 3 of ~10 (2 cameras 64x64). Run A trains straight; run B is killed with SIGKILL (its whole process group:
DataLoader workers and torchrun's ranks too) once it has trained past the checkpoint at step 4, then continues with
lerobot's own resume flags (`--resume=true --config_path=.../checkpoints/last/pretrained_model/train_config.json`).
Both record every step's losses and global batch (`--robostream.record`); B's steps must be A's and its final
weights A's, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from robostream.plan.state import state_checksum
from robostream.synth import generate
from tests.helpers import dataset_indices, tree_listing
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_env import run as run_in_kept_interpreter
from tests.lerobot_train.harness import (
    ACT,
    AUGMENT,
    COMMON,
    DIFFUSION,
    LEROBOT_ENV,
    TINY,
    WEIGHTS,
    act_args,
    assert_resumed_exactly,
    read_normalizer_mean,
    read_record,
    resume,
    run_script,
    tensor_bytes,
    train,
    train_until_killed,
)

# Each launch is bounded by SUBPROCESS_TIMEOUT_S (its stacks printed when it overruns: stacks_of); a test launches
# up to 4 runs, one after another, on a busy 2-core machine: the test's own limit is their sum.
pytestmark = pytest.mark.timeout(4 * SUBPROCESS_TIMEOUT_S + 60)


@pytest.fixture(scope="module")
def act_runs(lerobot_python: str, hf_home: Path, tiny_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Streaming ACT with augmentations in the workers: A straight to 12 steps, B killed after step 5 and resumed.
    Forked workers: a spawned one imports torch and lerobot again every pass (~10 s on CI's cores, 2 passes x 3
    runs); lerobot's default, spawn, with augmentations in its workers is trained by the language test."""
    tmp = tmp_path_factory.mktemp("act")
    args = [
        "--dataset.streaming=true",
        "--batch_size=8",
        "--num_workers=1",
        "--dataloader_multiprocessing_context=fork",
        *AUGMENT,
    ]
    train(lerobot_python, hf_home, act_args(tiny_root, tmp / "a", tmp / "a.jsonl", 12, *args))
    train_until_killed(
        lerobot_python,
        hf_home,
        act_args(tiny_root, tmp / "b", tmp / "b.jsonl", 12, *args),
        record=tmp / "b.jsonl",
        after_steps=5,
        preimported=True,
    )
    train(lerobot_python, hf_home, resume(tmp / "b"), preimported=True)
    return tmp


def test_streaming_act_trains_every_frame_with_augmentations(act_runs, tiny_root):
    a = read_record(act_runs / "a.jsonl")
    assert [r["step"] for r in a] == list(range(1, 13))
    assert all(math.isfinite(r["loss"][0]) and r["loss"][0] > 0 for r in a)
    epoch0 = [i for r in a if r["epoch"] == 0 for i in r["index"]]
    assert sorted(epoch0) == dataset_indices(tiny_root), "epoch 0 must be every frame exactly once"


def test_streaming_resume_after_sigkill_is_exact(act_runs):
    assert_resumed_exactly(
        read_record(act_runs / "a.jsonl"),
        read_record(act_runs / "b.jsonl"),
        act_runs / "a" / "checkpoints" / "000012" / WEIGHTS,
        act_runs / "b" / "checkpoints" / "000012" / WEIGHTS,
    )


def test_checkpoints_have_lerobots_layout_and_the_data_state(act_runs):
    checkpoints = act_runs / "b" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["000004", "000008", "000012", "last"], (
        "a temporary folder was left"
    )
    assert os.readlink(checkpoints / "last") == "000012"
    final = checkpoints / "000012"
    for name in (
        "config.json",
        "model.safetensors",
        "train_config.json",
        "policy_preprocessor.json",
        "policy_postprocessor.json",
    ):
        assert (final / "pretrained_model" / name).is_file(), name
    for name in ("optimizer_state.safetensors", "rng_state.safetensors", "training_step.json", "robostream_data.json"):
        assert (final / "training_state" / name).is_file(), name
    state = json.loads((final / "training_state" / "robostream_data.json").read_text())
    assert (state["step"], state["epoch"]) == (12, 1) and state["data"]["layout"] == [1, 1]
    saved = json.loads((final / "pretrained_model" / "train_config.json").read_text())
    assert saved["robostream"]["augment_on"] == "workers" and saved["dataset"]["image_transforms"]["enable"]
    # lerobot's --dataset.use_imagenet_stats (on by default): cameras normalised with ImageNet's mean
    np.testing.assert_allclose(
        read_normalizer_mean(final / "pretrained_model", "observation.images.cam0"), [0.485, 0.456, 0.406], rtol=1e-6
    )


def test_a_save_keeps_what_it_did_not_make_and_replaces_a_linked_step_folder(act_runs, lerobot_python, hf_home):
    """Checkpoint saves delete only what they made (issue 32, defect 11): a run saved steps 4 and 8 (run A's, a
    copy); the user keeps notes in `checkpoints/.tmp-notes/`, leaves a file `.tmp-x`, moves checkpoint 8 to another
    disk behind a symlink (`last` names it through the link), and resumes from checkpoint 4: the resumed run saves
    step 8 again (then 12). The notes, the file and the moved checkpoint stay as they were; `000008` becomes the
    new checkpoint (the link replaced, not followed); no scratch folder is left; a warning names what was left
    alone."""
    run = act_runs / "a-copy"
    # hard links (the copy's saves replace files, never write into them); `last` stays a link
    shutil.copytree(act_runs / "a", run, symlinks=True, copy_function=os.link)
    checkpoints = run / "checkpoints"
    shutil.rmtree(checkpoints / "000012")
    (checkpoints / "last").unlink()
    (checkpoints / "last").symlink_to("000008")
    (checkpoints / ".tmp-notes").mkdir()
    (checkpoints / ".tmp-notes" / "notes.txt").write_text("lr 1e-4 diverged at step 6")
    (checkpoints / ".tmp-x").write_text("a file")
    moved = act_runs / "other-disk" / "000008"
    moved.parent.mkdir()
    shutil.move(checkpoints / "000008", moved)
    (checkpoints / "000008").symlink_to(moved)
    kept = tree_listing(moved)
    assert os.readlink(checkpoints / "last") == "000008"

    stderr = train(
        lerobot_python,
        hf_home,
        [
            "--resume=true",
            f"--config_path={checkpoints / '000004' / 'pretrained_model' / 'train_config.json'}",
            f"--output_dir={run}",
            f"--robostream.record={act_runs / 'a-copy.jsonl'}",
        ],
        preimported=True,
    )

    assert tree_listing(checkpoints / ".tmp-notes") == {"notes.txt": b"lr 1e-4 diverged at step 6"}
    assert (checkpoints / ".tmp-x").read_text() == "a file"
    assert tree_listing(moved) == kept
    assert (checkpoints / "000008").is_dir() and not (checkpoints / "000008").is_symlink()
    assert tensor_bytes(checkpoints / "000008" / WEIGHTS).keys() == tensor_bytes(moved / WEIGHTS).keys()
    assert os.readlink(checkpoints / "last") == "000012"
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == [".tmp-notes", ".tmp-x", "000004", "000008", "000012", "last"]
    assert "['.tmp-notes', '.tmp-x'] look like the scratch folders of robostream's checkpoint saves" in stderr


def test_lerobots_own_loaders_take_the_checkpoint(act_runs, lerobot_python, hf_home, tiny_root):
    """from_pretrained + the saved processors (what lerobot-eval loads), then an action for a sample that lerobot's
    own LeRobotDataset reads."""
    model = act_runs / "b" / "checkpoints" / "last" / "pretrained_model"
    action = run_script(lerobot_python, hf_home, "lerobot_loads_checkpoint.py", str(model), str(tiny_root))
    assert action == {"shape": [1, 6], "finite": True}, action


def test_diffusion_trains_on_a_weighted_mixture_with_its_aggregated_stats(
    lerobot_python, hf_home, tiny_root, tiny2_root, tmp_path
):
    out = tmp_path / "mix"
    train(
        lerobot_python,
        hf_home,
        [
            *DIFFUSION,
            *COMMON,
            "--dataset.streaming=true",
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{tiny_root},{tiny2_root}]",
            "--robostream.weights=[0.7,0.3]",
            "--batch_size=8",
            "--num_workers=1",
            "--dataloader_multiprocessing_context=fork",
            "--steps=4",
            "--save_freq=4",
            f"--output_dir={out}",
            f"--robostream.record={tmp_path / 'mix.jsonl'}",
        ],
        preimported=True,
    )
    record = read_record(tmp_path / "mix.jsonl")
    assert [r["step"] for r in record] == [1, 2, 3, 4] and all(math.isfinite(r["loss"][0]) for r in record)
    assert {s for r in record for s in r["dataset_index"]} == {0, 1}
    # lerobot's aggregation with each source counted by the samples it gives an epoch: 0.7 and 0.3 of 49 + 31
    stats = [json.loads((r / "meta" / "stats.json").read_text()) for r in (tiny_root, tiny2_root)]
    counts = np.array([56, 24])
    expected = sum(np.array(s["action"]["mean"]) * n for s, n in zip(stats, counts)) / counts.sum()
    saved = read_normalizer_mean(out / "checkpoints" / "000004" / "pretrained_model", "action")
    np.testing.assert_allclose(saved, expected, rtol=1e-6)


def test_map_style_resume_after_sigkill_is_exact(lerobot_python, hf_home, tiny_root, tmp_path):
    """lerobot's data path (EpisodeAwareSampler, its resume arithmetic) with robostream's LeRobotDataset, resumed
    in the second epoch (49 frames, 7 steps an epoch; checkpoint 8): accelerate's loader sets its own pass count
    as the sampler's epoch, which must not send a resumed run back to epoch 0's order."""
    args = ["--batch_size=8", "--num_workers=0"]
    train(
        lerobot_python, hf_home, act_args(tiny_root, tmp_path / "a", tmp_path / "a.jsonl", 14, *args), preimported=True
    )
    train_until_killed(
        lerobot_python,
        hf_home,
        act_args(tiny_root, tmp_path / "b", tmp_path / "b.jsonl", 14, *args),
        record=tmp_path / "b.jsonl",
        after_steps=9,
        preimported=True,
    )
    train(lerobot_python, hf_home, resume(tmp_path / "b"), preimported=True)
    a = read_record(tmp_path / "a.jsonl")
    for epoch in (0, 1):
        assert sorted(i for r in a if r["epoch"] == epoch for i in r["index"]) == dataset_indices(tiny_root)
    assert [r["index"] for r in a if r["epoch"] == 0] != [r["index"] for r in a if r["epoch"] == 1]
    assert_resumed_exactly(
        a,
        read_record(tmp_path / "b.jsonl"),
        tmp_path / "a" / "checkpoints" / "000014" / WEIGHTS,
        tmp_path / "b" / "checkpoints" / "000014" / WEIGHTS,
    )


def test_two_processes_resume_exactly_and_elastically_on_one(lerobot_python, hf_home, tiny_root, two_process_runs):
    """torchrun (gloo): killed after step 5 and resumed on 2 processes: exact. The same checkpoint resumed on one
    process: the rest of epoch 0 is exactly the samples the 2-process run had left (each once), in other batches
    (the layout changed, so the batches' composition and the float sums differ: not bit for bit)."""
    runs = two_process_runs.path
    a = read_record(runs / "a.jsonl")
    # 49 frames: 2 ranks x 4 samples per step, the epoch's last step 2 x 1 (ranks padded to equal counts)
    assert [len(r["index"]) for r in a] == [8] * 6 + [2, 8] and all(len(r["loss"]) == 2 for r in a)
    assert_resumed_exactly(
        a,
        read_record(runs / "b.jsonl"),
        runs / "a" / "checkpoints" / "000008" / WEIGHTS,
        runs / "b" / "checkpoints" / "000008" / WEIGHTS,
    )

    train(
        lerobot_python,
        hf_home,
        [
            *resume(runs / "c"),
            f"--output_dir={runs / 'c'}",
            "--batch_size=8",
            f"--robostream.record={runs / 'c.jsonl'}",
        ],
        preimported=True,
    )
    c = read_record(runs / "c.jsonl")
    assert [r["step"] for r in c] == [5, 6, 7, 8] and all(len(r["loss"]) == 1 for r in c)
    before = {i for r in a if r["epoch"] == 0 and r["step"] <= 4 for i in r["index"]}
    left_a = {i for r in a if r["epoch"] == 0 and r["step"] > 4 for i in r["index"]}
    left_c = [i for r in c if r["epoch"] == 0 for i in r["index"]]
    # what A had left, without the samples 2 ranks repeat to stay equal (one rank needs no padding)
    assert len(left_c) == len(set(left_c)) and set(left_c) == left_a - before, "the rest of epoch 0 on one process"
    assert before | set(left_c) == set(dataset_indices(tiny_root))


# What every bad-flags case starts from: a valid streaming ACT run of one step.
BASE_FLAGS = [
    "--policy.type=act",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--steps=1",
    "--dataset.streaming=true",
]


def test_bad_flags_are_refused_naming_what_is_wrong(lerobot_python, hf_home, tiny_root, tiny2_root, tmp_path):
    """lerobot's error style: the exception (a ValueError, or draccus's usage error) names the flag or key; nothing
    is trained or written."""
    renamed = tmp_path / "renamed"
    shutil.copytree(tiny2_root, renamed)
    for name in ("info.json", "stats.json"):  # the same data under another state key: strict mixtures refuse it
        path = renamed / "meta" / name
        doc = json.loads(path.read_text())
        features = doc["features"] if name == "info.json" else doc
        features["observation.pressure"] = features.pop("observation.state")
        path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps([{"root": str(tiny_root), "read_options": {"cache_size": 1}}]))
    cases = {
        "missing_root": ["--dataset.repo_id=local/x", f"--dataset.root={tmp_path / 'nowhere'}"],
        "weights": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{tiny_root},{tiny2_root}]",
            "--robostream.weights=[0.5,0.3,0.2]",
        ],
        "weights_one_dataset": ["--dataset.repo_id=local/a", f"--dataset.root={tiny_root}", "--robostream.weights=[1]"],
        "strict": ["--dataset.repo_id=[local/a,local/b]", f"--dataset.root=[{tiny_root},{renamed}]"],
        "choice": ["--dataset.repo_id=local/a", f"--dataset.root={tiny_root}", "--robostream.batching=sorted"],
        "map_style_mixture": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{tiny_root},{tiny2_root}]",
            "--dataset.streaming=false",
        ],
        "mixture_and_root": [
            "--dataset.repo_id=mix",
            f"--robostream.mixture={tmp_path / 'mix.yaml'}",
            f"--dataset.root={tiny_root}",
        ],
        "video_backend": ["--dataset.repo_id=local/a", f"--dataset.root={tiny_root}", "--dataset.video_backend=decord"],
        "streaming_option": [
            "--dataset.repo_id=local/a",
            f"--dataset.root={tiny_root}",
            "--dataset.streaming=false",
            "--robostream.pool_size=4",
        ],
        "mixture_option": [
            "--dataset.repo_id=local/a",
            f"--dataset.root={tiny_root}",
            "--robostream.batching=stratified",
        ],
        # issue 32: batch 0 spun forever over empty streaming epochs, -3 was a bare islice error
        "batch_zero": ["--dataset.repo_id=local/a", f"--dataset.root={tiny_root}", "--batch_size=0"],
        "batch_negative": [
            "--dataset.repo_id=local/a",
            f"--dataset.root={tiny_root}",
            "--batch_size=-3",
            "--dataset.streaming=false",
        ],
        "zero_weights": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{tiny_root},{tiny2_root}]",
            "--robostream.weights=[0,0]",
        ],
        "read_options_key": ["--dataset.repo_id=mix", f"--robostream.mixture={options_file}"],
    }
    cases = {k: [*BASE_FLAGS, *v, f"--output_dir={out / k}"] for k, v in cases.items()}
    result = run_script(lerobot_python, hf_home, "main_errors.py", json.dumps(cases))
    got = result["errors"]
    assert "nowhere: dataset root does not exist" in got["missing_root"]
    assert "--robostream.weights has 3 values [0.5, 0.3, 0.2] but --dataset.repo_id names 2 sources" in got["weights"]
    assert "names one dataset" in got["weights_one_dataset"]
    assert "feature 'observation.pressure' is in source" in got["strict"] and "--robostream.mixture" in got["strict"]
    assert got["choice"] == "SystemExit 2" and "invalid choice: 'sorted'" in result["stderr"]["choice"]
    assert "add --dataset.streaming=true" in got["map_style_mixture"]
    assert "leave --dataset.root unset" in got["mixture_and_root"]
    assert "--dataset.video_backend='decord': choose one of" in got["video_backend"]
    assert "--robostream.pool_size=4: read only by the streaming dataset" in got["streaming_option"]
    assert "--robostream.batching=stratified: read only by a mixture" in got["mixture_option"]
    assert "--batch_size: must be >= 1, got 0" in got["batch_zero"]
    assert "--batch_size: must be >= 1, got -3" in got["batch_negative"]
    assert "the weights [proportion=0.0, proportion=0.0] give an epoch no sample" in got["zero_weights"]
    assert "source 0 {'root'" in got["read_options_key"] and "unknown keys ['cache_size']" in got["read_options_key"]
    assert not out.exists() or not any(out.rglob("*.safetensors")), "nothing is trained or saved"


def test_a_damaged_edited_or_foreign_data_state_is_refused(act_runs, lerobot_python, hf_home, tmp_path):
    """robostream_data.json is checked whole (issue 32): its step, epoch and data state under one checksum (an
    epoch edited 1 -> 0, or the data of step 4 pasted into step 8, were accepted and skipped samples), the data
    state's own checksum required, the file named when it is damaged (a bare JSONDecodeError / TypeError before),
    and a checkpoint resumed in the other mode refused naming both (streaming -> map-style trained other batches)."""
    saved = act_runs / "b" / "checkpoints"
    original = json.loads((saved / "000008" / "training_state" / "robostream_data.json").read_text())
    step_4 = json.loads((saved / "000004" / "training_state" / "robostream_data.json").read_text())

    def signed(document):  # an edit with the checksum of its content, as robostream would write it
        body = {k: v for k, v in document.items() if k != "checksum"}
        return {**body, "checksum": state_checksum(body)}

    unsigned_data = {k: v for k, v in original["data"].items() if k != "checksum"}
    contents = {
        "no_checksum": json.dumps({k: v for k, v in original.items() if k != "checksum"}),
        "epoch_edited": json.dumps({**original, "epoch": 0}),
        "data_of_step_4": json.dumps({**original, "data": step_4["data"]}),
        "file_of_step_4": json.dumps(step_4),
        "epoch_resigned": json.dumps(signed({**original, "epoch": 0})),
        "data_null": json.dumps({**original, "data": None}),
        "truncated": json.dumps(original)[:100],
        "empty": "",
        "a_list": "[1, 2]",
        "data_unsigned": json.dumps(signed({**original, "data": unsigned_data})),
        "map_style_checkpoint": json.dumps(signed({**original, "data": None})),  # what a map-style run writes
        "resumed_map_style": json.dumps(original),
    }
    cases = {}
    for name, content in contents.items():
        checkpoint = shutil.copytree(saved / "000008", tmp_path / name / "000008", copy_function=os.link)
        data_file = checkpoint / "training_state" / "robostream_data.json"
        data_file.unlink()  # a hard link: the run's own file stays as it was
        data_file.write_text(content)
        cases[name] = ["--resume=true", f"--config_path={checkpoint / 'pretrained_model' / 'train_config.json'}"]
    cases["resumed_map_style"] += ["--dataset.streaming=false", "--robostream.augment_on=device"]
    got = run_script(lerobot_python, hf_home, "main_errors.py", json.dumps(cases))["errors"]
    named = "000008/training_state/robostream_data.json"
    assert f"{named}: no 'checksum' key" in got["no_checksum"]
    for name in ("epoch_edited", "data_of_step_4", "data_null"):
        assert f"{named}: checksum " in got[name] and "does not match its content" in got[name], got[name]
    for name in ("truncated", "empty"):
        assert f"{named} is not a JSON document" in got[name], got[name]
    assert (
        f"{named}: expected an object with 'step', 'epoch', 'data', 'held_out' and 'checksum', got [1, 2]"
        in got["a_list"]
    )
    assert f"{named} is at step 4 but " in got["file_of_step_4"] and "at step 8" in got["file_of_step_4"]
    assert f"{named}: epoch 0 but its data state is of epoch 1" in got["epoch_resigned"]
    assert "resume state: no 'checksum' key" in got["data_unsigned"]
    assert (
        "was saved by a map-style (--dataset.streaming=false) run, but this run is streaming "
        "(--dataset.streaming=true)" in got["map_style_checkpoint"]
    )
    assert (
        "was saved by a streaming (--dataset.streaming=true) run, but this run is map-style "
        "(--dataset.streaming=false)" in got["resumed_map_style"]
    )
    assert json.loads((saved / "000008" / "training_state" / "robostream_data.json").read_text()) == original


def test_an_epoch_without_a_batch_is_an_error_not_an_endless_loop(lerobot_python, hf_home, tiny_root):
    """The training loop over epochs spun forever when every epoch was empty (issue 32: --batch_size=0, now
    refused at parse; still reachable with --robostream.uneven=drop and more processes than samples). A resumed
    run's first pass may be empty (saved after its epoch's last batch): then the next epoch is the error."""
    got = run_script(lerobot_python, hf_home, "empty_epochs.py", str(tiny_root))
    assert got["fresh"].startswith(
        "epoch 0 gave no batch to train on (49 samples in 4 episodes; --robostream.uneven=drop"
    ), got
    assert got["resumed"].startswith("epoch 1 gave no batch to train on"), got


@pytest.mark.parametrize("streaming", ["true", "false"])
def test_act_trains_on_a_dataset_with_language_columns(lerobot_python, hf_home, tmp_path, streaming):
    """lerobot-annotate's language columns (synth --language) reach training: map-style batches go through
    lerobot-train's own collate (default_collate fails on their rows), streaming batches carry them as lists.
    Both in lerobot's default worker context (spawn: the dataset, and the streaming run's augmentations, pickled
    into a fresh interpreter)."""
    root = generate(tmp_path / "ds", dataclasses.replace(TINY, language=True), jobs=1)
    args = [f"--dataset.streaming={streaming}", "--batch_size=8", "--num_workers=1"]
    if streaming == "true":
        args += AUGMENT
    train(lerobot_python, hf_home, act_args(root, tmp_path / "out", tmp_path / "run.jsonl", 3, *args), preimported=True)
    steps = read_record(tmp_path / "run.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3] and all(math.isfinite(r["loss"][0]) for r in steps)


def test_act_trains_on_a_depth_dataset_and_resumes_exactly(lerobot_python, hf_home, tmp_path):
    """lerobot 0.6.1's depth camera (tests/compat/lerobot_depth.py: lerobot's writer, HEVC gray12le, 2 RGB cameras,
    a string feature) streamed to ACT: trains and resumes exactly after SIGKILL. ACT's ResNet takes 3-channel
    images (given the 1-channel depth map it fails in its first conv, in lerobot too), so the depth camera is left
    out of the policy's inputs with lerobot's own `--policy.input_features` (the dataset's other inputs); the data
    path still carries it: the first batch of the saved configuration's data, through robostream train's
    to_device and the saved run's preprocessor, holds the depth map as float32 (B, 1, H, W) in whole mm
    (--dataset.depth_output_unit's default), not normalised."""
    from tests.compat.test_lerobot_compat import HERE as COMPAT

    root = tmp_path / "ds"
    writer = [str(COMPAT / "lerobot_depth.py"), str(root), "--write", "--hf-home", str(hf_home)]
    run_in_kept_interpreter(lerobot_python, hf_home, writer, **LEROBOT_ENV)  # the interpreter of run_script
    features = json.loads((root / "meta" / "info.json").read_text())["features"]
    depth = "observation.images.depth"
    assert features[depth]["info"]["is_depth_map"]
    inputs = {
        key: {"type": "VISUAL", "shape": [ft["shape"][2], *ft["shape"][:2]]}
        for key, ft in features.items()
        if ft["dtype"] == "video" and key != depth
    }
    inputs["observation.state"] = {"type": "STATE", "shape": features["observation.state"]["shape"]}
    args = [
        "--dataset.streaming=true",
        "--batch_size=8",
        "--num_workers=1",
        "--dataloader_multiprocessing_context=fork",
        f"--policy.input_features={json.dumps(inputs)}",
    ]

    def depth_run(name: str) -> list[str]:
        return [
            *ACT,
            *COMMON,
            "--dataset.repo_id=local/depth",
            f"--dataset.root={root}",
            f"--output_dir={tmp_path / name}",
            f"--robostream.record={tmp_path / name}.jsonl",
            "--steps=8",
            "--save_freq=4",
            *args,
        ]

    train(lerobot_python, hf_home, depth_run("a"), preimported=True)
    train_until_killed(
        lerobot_python, hf_home, depth_run("b"), record=tmp_path / "b.jsonl", after_steps=5, preimported=True
    )
    train(lerobot_python, hf_home, resume(tmp_path / "b"), preimported=True)
    a = read_record(tmp_path / "a.jsonl")
    assert [r["step"] for r in a] == list(range(1, 9)) and all(math.isfinite(r["loss"][0]) for r in a)
    assert sorted(i for r in a if r["epoch"] == 0 for i in r["index"]) == list(range(46)), "epoch 0: every frame"
    assert_resumed_exactly(
        a,
        read_record(tmp_path / "b.jsonl"),
        tmp_path / "a" / "checkpoints" / "000008" / WEIGHTS,
        tmp_path / "b" / "checkpoints" / "000008" / WEIGHTS,
    )

    saved = tmp_path / "b" / "checkpoints" / "last" / "pretrained_model"
    got = run_script(lerobot_python, hf_home, "depth_batch.py", str(saved), depth)
    assert got["inputs"] == sorted(inputs) and depth not in got["inputs"]
    assert (got["dtype"], got["shape"], got["whole"]) == ("torch.float32", [8, 1, 32, 48], True), got
    assert 10.0 <= got["min"] < got["max"] <= 10000.0, got
