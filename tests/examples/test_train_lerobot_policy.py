"""examples/train_lerobot_policy.py: lerobot's own ACT policy trained from robostream batches, and resumed exactly.

Opt-in like the other lerobot tests (ROBOSTREAM_LEROBOT_PYTHON names an interpreter with lerobot; skipped
otherwise): the example runs there, offline, with robostream from this checkout on PYTHONPATH.

The dataset is tiny (4 episodes of about 12 frames, 2 cameras of 64x64, state and action of 6) because ACT's
ResNet-18 is most of the cost on 2 CPU cores. Run A trains 8 steps straight (checkpoints at 4 and 8). Run B trains 4
steps, then a second process continues it with --resume to 8. With batches of 8 an epoch is 7 steps, so B resumes
mid-epoch 0 and crosses into epoch 1; with chunks of 10 actions most samples have padded action steps. Each run records every step's loss and batch `index` values; B's steps must be A's (same
samples, same order, same loss to the last bit) and B's final weights A's, byte for byte (the RNG of dropout and
the VAE noise is part of the checkpoint)."""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
from pathlib import Path

import pytest

from robostream.synth import SynthConfig, generate
from tests.helpers import copy_tree, dataset_indices
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S, offline_env, run

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "examples" / "train_lerobot_policy.py"
STEPS, SAVE_EVERY, BATCH = 8, 4, 8
TINY = SynthConfig(episodes=4, cameras=2, height=64, width=64, fps=20, episode_length=12, state_dim=6,
                   data_file_mb=0.005, video_file_mb=0.02, seed=7)
WEIGHTS = Path("pretrained_model") / "model.safetensors"


def train(python: str, hf_home: Path, root: Path, out: Path, record: Path, steps: int, *extra: str) -> str:
    args = [str(SCRIPT), "--root", str(root), "--output_dir", str(out), "--record_samples", str(record),
            "--policy", "act", "--steps", str(steps), "--save_every", str(SAVE_EVERY), "--batch_size", str(BATCH),
            "--num_workers", "1", "--seed", "3", *extra]
    # One torch thread: on a busy 2-core machine two OpenMP threads spin against other processes (measured: 49 s
    # instead of 4 s for these 8 steps); the result is the same, runs A and B just have to use the same setting.
    return run(python, hf_home, args, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def read_record(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def tensor_bytes(path: Path) -> dict[str, bytes]:
    """name -> raw bytes of every tensor of a .safetensors file (8-byte header size, JSON header, data), read
    without torch so the comparison is exact and needs nothing from this interpreter."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    data = raw[8 + size:]
    return {name: data[t["data_offsets"][0]:t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


@pytest.fixture(scope="module")
def root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # lerobot_python first: without the interpreter the module skips before generating anything
    return generate(tmp_path_factory.mktemp("tiny") / "ds", TINY)


@pytest.fixture(scope="module")
def runs(lerobot_python: str, hf_home: Path, root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("train_lerobot_policy")
    out_a = train(lerobot_python, hf_home, root, tmp / "a", tmp / "a.jsonl", STEPS)
    out_b1 = train(lerobot_python, hf_home, root, tmp / "b", tmp / "b.jsonl", SAVE_EVERY)
    out_b2 = train(lerobot_python, hf_home, root, tmp / "b", tmp / "b.jsonl", STEPS, "--resume")
    return {"tmp": tmp, "a": read_record(tmp / "a.jsonl"), "b": read_record(tmp / "b.jsonl"),
            "out_a": out_a, "out_b1": out_b1, "out_b2": out_b2}


def test_act_trains_with_a_finite_loss_on_every_frame(runs, root):
    a = runs["a"]
    assert [r["step"] for r in a] == list(range(1, STEPS + 1))
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in a), [r["loss"] for r in a]
    assert "act: " in runs["out_a"] and "'action': [0.0, 0.05," in runs["out_a"], runs["out_a"][-2000:]
    epoch0 = [i for r in a if r["epoch"] == 0 for i in r["index"]]
    assert sorted(epoch0) == dataset_indices(root), "epoch 0 must be every frame exactly once"
    assert {r["epoch"] for r in a} == {0, 1}
    # chunks of 10 actions over ~12-frame episodes: the windows run past episode ends, and ACT's loss masks them
    assert all(r["padded"].keys() == {"action_is_pad"} for r in a) and sum(r["padded"]["action_is_pad"] for r in a)


def test_training_changes_the_parameters(runs):
    ckpt = runs["tmp"] / "a"
    before, after = tensor_bytes(ckpt / "checkpoint-4" / WEIGHTS), tensor_bytes(ckpt / "checkpoint-8" / WEIGHTS)
    assert before.keys() == after.keys() and len(before) > 100
    changed = [k for k in before if before[k] != after[k]]
    # Every learned tensor moves (VAE encoder, transformer, ResNet convs, action head). What stays is buffers:
    # the backbone's BatchNorms (ACT uses torchvision's FrozenBatchNorm2d) and the fixed sinusoidal table.
    fixed = re.compile(r"model\.backbone\..*(bn\d|downsample\.1)\.(weight|bias|running_mean|running_var)"
                       r"|model\.vae_encoder_pos_enc")
    assert [k for k in before if k not in changed and not fixed.fullmatch(k)] == []
    assert len(changed) > 50 and "model.action_head.weight" in changed and "model.backbone.conv1.weight" in changed


def test_checkpoints_are_complete_and_committed(runs):
    for out in ("a", "b"):
        folder = runs["tmp"] / out
        assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-4", "checkpoint-8"], "a temp dir was left"
        final = folder / "checkpoint-8"
        assert sorted(p.name for p in final.iterdir()) == ["data_state.json", "pretrained_model", "training_state"]
        for name in ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
            assert (final / "pretrained_model" / name).is_file(), name
        for name in ("optimizer_state.safetensors", "rng_state.safetensors", "training_step.json"):
            assert (final / "training_state" / name).is_file(), name
        state = json.loads((final / "data_state.json").read_text())
        assert (state["step"], state["epoch"]) == (STEPS, 1) and state["data"]


def test_resumed_run_continues_exactly(runs):
    a, b = runs["a"], runs["b"]
    assert f"resumed from {runs['tmp'] / 'b' / 'checkpoint-4'} at step 4 epoch 0" in runs["out_b2"], \
        runs["out_b2"][-2000:]
    assert [r["step"] for r in b] == list(range(1, STEPS + 1)), "B did not stop at 4 and continue from 5"
    for ra, rb in zip(a, b):  # the same batches in the same order, and the same computation on them (the loss)
        assert rb == ra, f"step {rb['step']}: the resumed run's {rb} != the uninterrupted run's {ra}"
    final_a = tensor_bytes(runs["tmp"] / "a" / "checkpoint-8" / WEIGHTS)
    final_b = tensor_bytes(runs["tmp"] / "b" / "checkpoint-8" / WEIGHTS)
    assert final_a.keys() == final_b.keys()
    assert [k for k in final_a if final_a[k] != final_b[k]] == [], "the resumed weights differ"


def test_a_dataset_without_stats_is_refused_by_name(lerobot_python, hf_home, root, tmp_path):
    """lerobot's normaliser would pass unnormalised features through silently; the example names what is missing."""
    bare = copy_tree(root, tmp_path / "ds")
    (bare / "meta" / "stats.json").unlink()
    args = [str(SCRIPT), "--root", str(bare), "--output_dir", str(tmp_path / "out"), "--steps", "1"]
    proc = subprocess.run([lerobot_python, *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                          env=offline_env(hf_home, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "meta/stats.json of the dataset has no statistics for" in proc.stderr, proc.stderr[-2000:]
    assert "'observation.state'" in proc.stderr and "'action'" in proc.stderr
    assert not (tmp_path / "out").exists(), "nothing is trained or saved"
