"""Sharded models in `robostream train` (issue 36): accelerate's FSDP1 on lerobot-train's path (the full state
gathered for each checkpoint, the optimizer state resharded after `prepare` on resume), the other sharded modes
refused naming their flag.

FSDP runs on GPUs only (CPU_SKIP says why): the SIGKILL + resume test needs a GPU in lerobot's environment (2
processes with 2 GPUs, 1 with one: the gather and reshard collectives run either way). On CPU what runs is what a
CPU user gets: asked for FSDP, torchrun's gloo processes train unsharded with a warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lerobot_env import SUBPROCESS_TIMEOUT_S
from tests.lerobot_train.harness import (
    ACT,
    WEIGHTS,
    assert_resumed_exactly,
    read_record,
    resume,
    run_script,
    tensor_bytes,
    train,
    train_until_killed,
)

# the GPU test launches 3 runs; on CPU the 2-process runs (conftest's two_process_runs, 3 launches) may be made here
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
# what `accelerate launch --use_fsdp` sets (its use_orig_params defaults to true, the plugin's to false), and
# cuBLAS's reproducible reductions: A against B
FSDP_ENV = {"ACCELERATE_USE_FSDP": "true", "FSDP_USE_ORIG_PARAMS": "true", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


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


def test_fsdp_resume_after_sigkill_is_exact(lerobot_python, hf_home, tiny_root, tmp_path):
    """FSDP: run B killed after step 5 resumes from its checkpoint at step 4 (weights and optimizer state gathered
    whole, the optimizer resharded after prepare) and trains A's steps, A's samples and losses, to A's weights.
    torchrun for one process too: accelerate shards only processes launched as a distributed job."""
    available = run_script(lerobot_python, hf_home, "gpus.py")["gpus"]
    if not available:
        pytest.skip(CPU_SKIP)
    launch = {"processes": min(available, 2), "torchrun": True, "env": FSDP_ENV}
    cuda = ["--cudnn_deterministic=true"]
    log = train(
        lerobot_python,
        hf_home,
        [*run_args(tiny_root, tmp_path / "a", tmp_path / "a.jsonl", 8, device="cuda"), *cuda],
        **launch,
    )
    assert "(FSDP)" in log and "is set but accelerate chose" not in log, log[-3000:]
    train_until_killed(
        lerobot_python,
        hf_home,
        [*run_args(tiny_root, tmp_path / "b", tmp_path / "b.jsonl", 8, device="cuda"), *cuda],
        record=tmp_path / "b.jsonl",
        after_steps=5,
        **launch,
    )
    train(lerobot_python, hf_home, resume(tmp_path / "b"), **launch)
    a = read_record(tmp_path / "a.jsonl")
    assert [r["step"] for r in a] == list(range(1, 9)) and all(len(r["loss"]) == launch["processes"] for r in a)
    final = tmp_path / "a" / "checkpoints" / "000008"
    assert_resumed_exactly(
        a, read_record(tmp_path / "b.jsonl"), final / WEIGHTS, tmp_path / "b/checkpoints/000008" / WEIGHTS
    )
    # gathered whole: the policy's own names, no FSDP flat parameters (B's resume loaded them strictly, shapes too)
    names = tensor_bytes(final / WEIGHTS).keys()
    assert names and not [k for k in names if "_fsdp" in k or "flat_param" in k], sorted(names)[:10]
    assert (final / "training_state" / "optimizer_state.safetensors").is_file()


def test_fsdp_asked_for_on_cpu_trains_unsharded_with_a_warning(two_process_runs):
    """conftest's two_process_runs: run A on 2 torchrun processes with ACCELERATE_USE_FSDP set warns that the model
    is not sharded and trains both processes (B, without it, killed and resumed, trains A's steps bit for bit:
    test_two_processes_resume_exactly_and_elastically_on_one)."""
    log = two_process_runs.log_a
    assert "ACCELERATE_USE_FSDP is set but accelerate chose MULTI_CPU on cpu" in log, log[-3000:]
    assert [len(r["loss"]) for r in read_record(two_process_runs.path / "a.jsonl")] == [2] * 8


def test_other_sharded_modes_are_refused_naming_the_flag(lerobot_python, hf_home):
    """accelerate picks DeepSpeed and Megatron-LM on GPUs only, as FSDP: refuse_sharded is given each mode."""
    results = run_script(lerobot_python, hf_home, "refuse_sharded.py")
    assert results["FSDP"] == "accepted"
    for mode, flag in (
        ("FSDP2", "--fsdp_version=2"),
        ("FSDP flat", "--fsdp_use_orig_params=true"),
        ("DEEPSPEED", "--use_deepspeed"),
        ("MEGATRON_LM", "--use_megatron_lm"),
    ):
        assert flag in results[mode] and "not supported" in results[mode], results[mode]
