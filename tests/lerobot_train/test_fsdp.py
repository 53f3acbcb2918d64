"""Sharded models in `robostream train` (issue 36): accelerate's FSDP1 on lerobot-train's path (the full state
gathered for each checkpoint, the optimizer state resharded after `prepare` on resume), the other sharded modes
refused naming their flag.

FSDP runs on GPUs only (CPU_SKIP says why): the SIGKILL + resume test needs a GPU in lerobot's environment (2
processes with 2 GPUs, 1 with one: the gather and reshard collectives run either way). On CPU what runs is what a
CPU user gets: asked for FSDP, torchrun's gloo processes train unsharded with a warning.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from robostream.synth import generate
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S, offline_env
from tests.lerobot_train import test_train_command
from tests.lerobot_train.test_train_command import (
    ACT,
    TINY,
    WEIGHTS,
    assert_resumed_exactly,
    read_record,
    resume,
    tensor_bytes,
    train,
    train_until_killed,
)

pytestmark = pytest.mark.timeout(3 * SUBPROCESS_TIMEOUT_S + 60)
CPU_SKIP = (
    "FSDP cannot run without a GPU: accelerate 1.15 chooses DistributedType.FSDP only for processes on "
    "accelerators (accelerate/state.py: MULTI_GPU/NPU/XPU/...); with --policy.device=cpu (Accelerator(cpu=True)) "
    "torchrun's processes are MULTI_CPU over gloo and ACCELERATE_USE_FSDP is ignored "
    "(test_fsdp_asked_for_on_cpu_trains_unsharded_with_a_warning), though torch 2.11's FSDP1 itself trains on "
    "CPU over gloo"
)
# pyav decodes: the decoder is not what is tested here, and it brings its own FFmpeg (GPU machines may have none)
STREAMING = ["--dataset.streaming=true", "--dataset.video_backend=pyav", "--batch_size=4", "--num_workers=0"]
BASE = ["--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null", "--seed=3", "--log_freq=1"]


@pytest.fixture(scope="module")
def root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("tiny") / "ds", TINY)


def run_args(root: Path, out: Path, record: Path, steps: int, *, device: str) -> list[str]:
    return [
        *ACT,
        *BASE,
        *STREAMING,
        f"--policy.device={device}",
        "--dataset.repo_id=local/tiny",
        f"--dataset.root={root}",
        f"--output_dir={out}",
        f"--robostream.record={record}",
        f"--steps={steps}",
        "--save_freq=4",
    ]


def torchrun(python: str, processes: int) -> list[str]:
    """torchrun for one process too: accelerate shards only processes launched as a distributed job."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "robostream.lerobot.train",
    ]


def gpus(python: str, hf_home: Path) -> int:
    probe = [python, "-c", "import torch; print(torch.cuda.device_count())"]
    proc = subprocess.run(probe, capture_output=True, text=True, timeout=120, env=offline_env(hf_home), check=True)
    return int(proc.stdout.strip())


def test_fsdp_resume_after_sigkill_is_exact(lerobot_python, hf_home, root, tmp_path, monkeypatch):
    """FSDP: run B killed after step 5 resumes from its checkpoint at step 4 (weights and optimizer state gathered
    whole, the optimizer resharded after prepare) and trains A's steps, A's samples and losses, to A's weights."""
    available = gpus(lerobot_python, hf_home)
    if not available:
        pytest.skip(CPU_SKIP)
    processes = min(available, 2)
    monkeypatch.setattr(test_train_command, "launcher", torchrun)
    # what `accelerate launch --use_fsdp` sets (its use_orig_params defaults to true, the plugin's to false)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_USE_ORIG_PARAMS", "true")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's reproducible reductions: A against B
    cuda = ["--cudnn_deterministic=true"]
    log = train(
        lerobot_python,
        hf_home,
        [*run_args(root, tmp_path / "a", tmp_path / "a.jsonl", 8, device="cuda"), *cuda],
        processes=processes,
    )
    assert "(FSDP)" in log and "is set but accelerate chose" not in log, log[-3000:]
    train_until_killed(
        lerobot_python,
        hf_home,
        [*run_args(root, tmp_path / "b", tmp_path / "b.jsonl", 8, device="cuda"), *cuda],
        tmp_path / "b.jsonl",
        after_steps=5,
        processes=processes,
    )
    train(lerobot_python, hf_home, resume(tmp_path / "b"), processes=processes)
    a = read_record(tmp_path / "a.jsonl")
    assert [r["step"] for r in a] == list(range(1, 9)) and all(len(r["loss"]) == processes for r in a)
    final = tmp_path / "a" / "checkpoints" / "000008"
    assert_resumed_exactly(
        a, read_record(tmp_path / "b.jsonl"), final / WEIGHTS, tmp_path / "b/checkpoints/000008" / WEIGHTS
    )
    # gathered whole: the policy's own names, no FSDP flat parameters (B's resume loaded them strictly, shapes too)
    names = tensor_bytes(final / WEIGHTS).keys()
    assert names and not [k for k in names if "_fsdp" in k or "flat_param" in k], sorted(names)[:10]
    assert (final / "training_state" / "optimizer_state.safetensors").is_file()


def test_fsdp_asked_for_on_cpu_trains_unsharded_with_a_warning(lerobot_python, hf_home, root, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    log = train(
        lerobot_python, hf_home, run_args(root, tmp_path / "a", tmp_path / "a.jsonl", 2, device="cpu"), processes=2
    )
    assert "ACCELERATE_USE_FSDP is set but accelerate chose MULTI_CPU on cpu" in log, log[-3000:]
    assert [len(r["loss"]) for r in read_record(tmp_path / "a.jsonl")] == [2, 2]


REFUSE = r"""
import json
from types import SimpleNamespace
from accelerate.utils import DistributedType
from robostream.lerobot.train import refuse_sharded
results = {}
for name, mode, fsdp2, orig in (
    ("FSDP", "FSDP", False, True),
    ("FSDP2", "FSDP", True, True),
    ("FSDP flat", "FSDP", False, False),
    ("DEEPSPEED", "DEEPSPEED", False, False),
    ("MEGATRON_LM", "MEGATRON_LM", False, False),
):
    plugin = SimpleNamespace(use_orig_params=orig)
    accelerator = SimpleNamespace(
        distributed_type=DistributedType[mode], is_fsdp2=fsdp2, state=SimpleNamespace(fsdp_plugin=plugin)
    )
    try:
        refuse_sharded(accelerator)
        results[name] = "accepted"
    except ValueError as exc:
        results[name] = str(exc)
print(json.dumps(results))
"""


def test_other_sharded_modes_are_refused_naming_the_flag(lerobot_python, hf_home):
    """accelerate picks DeepSpeed and Megatron-LM on GPUs only, as FSDP: refuse_sharded is given each mode."""
    proc = subprocess.run(
        [lerobot_python, "-c", REFUSE],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=test_train_command.command_env(hf_home),
        check=True,
    )
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["FSDP"] == "accepted"
    for mode, flag in (
        ("FSDP2", "--fsdp_version=2"),
        ("FSDP flat", "--fsdp_use_orig_params=true"),
        ("DEEPSPEED", "--use_deepspeed"),
        ("MEGATRON_LM", "--use_megatron_lm"),
    ):
        assert flag in results[mode] and "not supported" in results[mode], results[mode]
