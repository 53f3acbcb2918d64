"""What the `robostream train` tests share: the tiny datasets and policies, launching the command (one process or
torchrun's), killing a run as a node failure would, reading what a run recorded and saved, and the reference
scripts (tests/lerobot_train/scripts/) run in lerobot's environment.

Each `robostream train` is a process of its own, killed and resumed for real: fresh, or forked from an interpreter
that has imported the command (`preimported=True`; launch.py says which runs are which and why). The reference
scripts, which call robostream's and lerobot's functions and print one JSON line, run one after another in the
lerobot interpreter that tests.lerobot_env keeps for the session (run_script). Importing torch and lerobot is ~15 s
of a fresh interpreter on CI's cores: both pay it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from robostream.synth import SynthConfig
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S, offline_env
from tests.lerobot_env import run as run_in_kept_interpreter
from tests.lerobot_train.launch import Run, start_fresh, start_preimported

REPO = Path(__file__).parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
TINY = SynthConfig(
    episodes=4,
    cameras=2,
    height=64,
    width=64,
    fps=20,
    episode_length=12,
    state_dim=6,
    data_file_mb=0.005,
    video_file_mb=0.02,
    seed=7,
)
TINY2 = dataclasses.replace(TINY, episodes=3, episode_length=10, seed=8)
ACT = [
    "--policy.type=act",
    "--policy.dim_model=64",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=128",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=10",
]
DIFFUSION = [
    "--policy.type=diffusion",
    "--policy.down_dims=[32,64]",
    "--policy.crop_shape=[56,56]",
    "--policy.use_group_norm=true",
    "--policy.diffusion_step_embed_dim=32",
    "--policy.spatial_softmax_num_keypoints=8",
    "--policy.horizon=8",
    "--policy.n_action_steps=4",
    "--policy.n_obs_steps=2",
]
COMMON = [
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null",
    "--seed=3",
    "--log_freq=1",
]
# The eval split's datasets (synth: episode e does task e % 4, episode 4 starts with task 0): 8 episodes hold out
# [4, 5, 6, 7] at eval_split=0.25 (the last of each task's two), 6 episodes hold out [2, 3, 4, 5] (tasks 2 and 3
# have one episode each: ceil(1 x 0.25) = 1 holds it out).
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
AUGMENT = ["--dataset.image_transforms.enable=true", "--dataset.image_transforms.max_num_transforms=3"]
WEIGHTS = Path("pretrained_model") / "model.safetensors"
# One torch thread: on a busy 2-core machine two OpenMP threads spin against other processes; runs compared with
# each other use the same setting, so the arithmetic is the same. PYTHONFAULTHANDLER: a run stuck past its time
# prints every thread's stack when sent SIGABRT (stacks_of). NO_PROXY: the tests' HTTP servers are local.
LEROBOT_ENV = {
    "PYTHONPATH": str(REPO),
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONFAULTHANDLER": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def command_env(hf_home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return offline_env(hf_home, **LEROBOT_ENV, **(extra or {}))


def act_args(root: Path, out: Path, record: Path, steps: int, *extra: str) -> list[str]:
    """ACT on one dataset, a checkpoint every 4 steps, every step recorded."""
    return [
        *ACT,
        *COMMON,
        "--dataset.repo_id=local/tiny",
        f"--dataset.root={root}",
        f"--output_dir={out}",
        f"--robostream.record={record}",
        f"--steps={steps}",
        "--save_freq=4",
        *extra,
    ]


def launcher(python: str, *, processes: int = 1, torchrun: bool = False, script: Path | None = None) -> list[str]:
    """`robostream train` (or `script`, a wrapper that ends in its main()) in `processes` processes: torchrun's
    when there are several, or when `torchrun` (accelerate shards only processes launched as a distributed job)."""
    program = [str(script)] if script else ["-m", "robostream.lerobot.train"]
    if processes == 1 and not torchrun:
        return [python, *program]
    # --standalone: a rendezvous on a free port (several jobs may run on the machine at once)
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *program]


def start(
    python: str,
    hf_home: Path,
    args: list[str],
    *,
    processes: int = 1,
    torchrun: bool = False,
    script: Path | None = None,
    env: dict[str, str] | None = None,
    preimported: bool = False,
) -> Run:
    """Start a run: fresh, or forked from the interpreter that has imported the command (launch.py says when each
    is used). A preimported run is one process, in the session's environment (no `env`)."""
    if preimported:
        assert processes == 1 and not torchrun and not env, "a preimported run is one process of the same environment"
        return start_preimported(python, command_env(hf_home), args, script)
    command = [*launcher(python, processes=processes, torchrun=torchrun, script=script), *args]
    return start_fresh(command, command_env(hf_home, env))


def train(python: str, hf_home: Path, args: list[str], **launch: Any) -> str:
    """Run a training (started as `start` starts it) to its end; its stderr (the log). A failure or an overrun
    fails the test with the log."""
    run = start(python, hf_home, args, **launch)
    try:
        code = run.wait(SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"train {' '.join(args)} did not finish in {SUBPROCESS_TIMEOUT_S} s:\n{stacks_of(run)}")
    if code != 0:
        stdout = run.stdout.read_text(errors="replace")
        pytest.fail(f"train {' '.join(args)} failed ({code}):\n{stdout[-3000:]}\n{run.log()[-4000:]}")
    return run.log()


def train_until_killed(
    python: str, hf_home: Path, args: list[str], *, record: Path, after_steps: int, **launch: Any
) -> None:
    """Start a run (as `start` starts it), SIGKILL it and every process it started once it recorded `after_steps`
    steps (past a checkpoint)."""
    run = start(python, hf_home, args, **launch)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while not (record.exists() and len(record.read_text().splitlines()) >= after_steps):
        if (code := run.poll()) is not None:
            pytest.fail(f"the run to kill ended first ({code}):\n{run.log()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"the run to kill did not reach step {after_steps} in {SUBPROCESS_TIMEOUT_S} s:\n{stacks_of(run)}"
            )
        time.sleep(0.02)
    signal_tree(run.pid, signal.SIGKILL)
    run.wait(SUBPROCESS_TIMEOUT_S)


def stacks_of(run: Run) -> str:
    """A stuck run's every thread's stack (faulthandler prints them on SIGABRT: PYTHONFAULTHANDLER) in each of its
    processes, then the run killed: what a hang report needs."""
    signal_tree(run.pid, signal.SIGABRT)
    try:
        run.wait(30)
    except subprocess.TimeoutExpired:
        signal_tree(run.pid, signal.SIGKILL)
        run.wait(30)
    signal_tree(run.pid, signal.SIGKILL)
    return run.log()[-20000:]


def signal_tree(pid: int, signum: int) -> None:
    """Signal a process and every descendant at once (SIGKILL: as a node failure would): torchrun starts its ranks
    in sessions of their own, so its process group alone would leave them running."""
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = psutil.Process(pid)
        for process in [*tree.children(recursive=True), tree]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signum)


def resume(output_dir: Path) -> list[str]:
    """lerobot's resume flags for the run in `output_dir`, from its last checkpoint."""
    return [
        "--resume=true",
        f"--config_path={output_dir / 'checkpoints' / 'last' / 'pretrained_model'}/train_config.json",
    ]


def run_script(python: str, hf_home: Path, name: str, *args: str) -> Any:
    """The JSON document a reference script (tests/lerobot_train/scripts/`name`) prints last, run in the kept
    lerobot interpreter; a failure fails the test with its output's tail."""
    stdout = run_in_kept_interpreter(python, hf_home, [str(SCRIPTS / name), *args], **LEROBOT_ENV)
    return json.loads(stdout.strip().splitlines()[-1])


def read_record(path: Path) -> list[dict]:
    """The steps a run recorded (--robostream.record): one JSON document a line."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def safetensors_entries(path: Path) -> tuple[dict[str, dict], bytes]:
    """A .safetensors file's header (name -> dtype, shape, offsets) and data, read without torch so comparisons
    are exact."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    return header, raw[8 + size :]


def tensor_bytes(path: Path) -> dict[str, bytes]:
    """name -> raw bytes of every tensor of a .safetensors file."""
    header, data = safetensors_entries(path)
    return {name: data[t["data_offsets"][0] : t["data_offsets"][1]] for name, t in header.items()}


def read_normalizer_mean(model_dir: Path, key: str) -> np.ndarray:
    """The normaliser's `<key>.mean` from the preprocessor's saved state."""
    header, data = safetensors_entries(
        next(model_dir.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    )
    t = header[f"{key}.mean"]
    raw = data[t["data_offsets"][0] : t["data_offsets"][1]]
    return np.frombuffer(raw, dtype={"F32": np.float32, "F64": np.float64}[t["dtype"]])


def write_progress(root: Path) -> None:
    """sarm_progress.parquet as lerobot's compute_rabc_weights writes it (index, episode_index, frame_index,
    progress_sparse): episodes 0 and 2 (mod 4) progress, 1 goes backwards (weight 0), 3 stalls (RA-BC's soft
    weights)."""
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


def assert_resumed_exactly(a: list[dict], b: list[dict], final_a: Path, final_b: Path) -> None:
    """B (killed, resumed) recorded some steps twice: those after the checkpoint it resumed from. Every step it
    recorded must be A's step (same samples, same losses to the last bit), and its final weights A's."""
    by_step = {r["step"]: r for r in a}
    assert sorted({r["step"] for r in b}) == sorted(by_step), "B did not train every step once it resumed"
    assert len(b) > len(a), "B was not killed after its checkpoint (no step was trained twice)"
    for rb in b:
        assert rb == by_step[rb["step"]], f"step {rb['step']}: resumed {rb} != uninterrupted {by_step[rb['step']]}"
    wa, wb = tensor_bytes(final_a), tensor_bytes(final_b)
    assert wa.keys() == wb.keys() and [k for k in wa if wa[k] != wb[k]] == [], "the resumed weights differ"
