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

import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from robostream.plan.state import state_checksum
from robostream.synth import SynthConfig, generate
from tests.helpers import dataset_indices, tree_listing
from tests.lerobot_env import SUBPROCESS_TIMEOUT_S, offline_env

REPO = Path(__file__).parents[2]
# Each launch is bounded by SUBPROCESS_TIMEOUT_S (its stacks printed when it overruns: stacks_of); a test launches
# up to 4 runs, one after another, on a busy 2-core machine: the test's own limit is their sum.
pytestmark = pytest.mark.timeout(4 * SUBPROCESS_TIMEOUT_S + 60)
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
TINY2 = SynthConfig(
    episodes=3,
    cameras=2,
    height=64,
    width=64,
    fps=20,
    episode_length=10,
    state_dim=6,
    data_file_mb=0.005,
    video_file_mb=0.02,
    seed=8,
)
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
AUGMENT = ["--dataset.image_transforms.enable=true", "--dataset.image_transforms.max_num_transforms=3"]
WEIGHTS = Path("pretrained_model") / "model.safetensors"


def command_env(hf_home: Path) -> dict[str, str]:
    # One torch thread: on a busy 2-core machine two OpenMP threads spin against other processes; runs compared
    # with each other use the same setting, so the arithmetic is the same.
    # PYTHONFAULTHANDLER: a run stuck past its time prints every thread's stack when sent SIGABRT (stacks_of).
    return offline_env(hf_home, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONFAULTHANDLER="1")


def launcher(python: str, processes: int) -> list[str]:
    if processes == 1:
        return [python, "-m", "robostream.lerobot.train"]
    # --standalone: a rendezvous on a free port (several jobs may run on the machine at once)
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "robostream.lerobot.train",
    ]


def train(python: str, hf_home: Path, args: list[str], *, processes: int = 1) -> str:
    proc = subprocess.Popen(
        [*launcher(python, processes), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=command_env(hf_home),
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"train {' '.join(args)} did not finish in {SUBPROCESS_TIMEOUT_S} s:\n{stacks_of(proc)}")
    if proc.returncode != 0:
        pytest.fail(f"train {' '.join(args)} failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-4000:]}")
    return stderr


def stacks_of(proc: subprocess.Popen) -> str:
    """A stuck run's every thread's stack (faulthandler prints them on SIGABRT: PYTHONFAULTHANDLER) in each of its
    processes, then the run killed: what a hang report needs."""
    signal_tree(proc.pid, signal.SIGABRT)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        signal_tree(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
    signal_tree(proc.pid, signal.SIGKILL)
    return stderr[-20000:]


def train_until_killed(
    python: str, hf_home: Path, args: list[str], record: Path, after_steps: int, *, processes: int = 1
) -> None:
    """Start a run, SIGKILL its process group once it recorded `after_steps` steps (past a checkpoint)."""
    proc = subprocess.Popen(
        [*launcher(python, processes), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=command_env(hf_home),
        start_new_session=True,
    )
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while not (record.exists() and len(record.read_text().splitlines()) >= after_steps):
        if proc.poll() is not None:
            pytest.fail(f"the run to kill ended first ({proc.returncode}):\n{proc.stderr.read()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"the run to kill did not reach step {after_steps} in {SUBPROCESS_TIMEOUT_S} s:\n{stacks_of(proc)}"
            )
        time.sleep(0.02)
    signal_tree(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()


def signal_tree(pid: int, signum: int) -> None:
    """Signal a process and every descendant at once (SIGKILL: as a node failure would): torchrun starts its ranks
    in sessions of their own, so its process group alone would leave them running."""
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = psutil.Process(pid)
        for process in [*tree.children(recursive=True), tree]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signum)


def resume(output_dir: Path) -> list[str]:
    return [
        "--resume=true",
        f"--config_path={output_dir / 'checkpoints' / 'last' / 'pretrained_model'}/train_config.json",
    ]


def read_record(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def tensor_bytes(path: Path) -> dict[str, bytes]:
    """name -> raw bytes of every tensor of a .safetensors file, read without torch so the comparison is exact."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    return {
        name: data[t["data_offsets"][0] : t["data_offsets"][1]] for name, t in header.items() if name != "__metadata__"
    }


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


@pytest.fixture(scope="module")
def root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("tiny") / "ds", TINY)


@pytest.fixture(scope="module")
def root2(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("tiny2") / "ds", TINY2)


def single(root: Path, out: Path, record: Path, steps: int, *extra: str) -> list[str]:
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


@pytest.fixture(scope="module")
def act_runs(lerobot_python: str, hf_home: Path, root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
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
    train(lerobot_python, hf_home, single(root, tmp / "a", tmp / "a.jsonl", 12, *args))
    train_until_killed(
        lerobot_python, hf_home, single(root, tmp / "b", tmp / "b.jsonl", 12, *args), tmp / "b.jsonl", after_steps=5
    )
    train(lerobot_python, hf_home, resume(tmp / "b"))
    return tmp


def test_streaming_act_trains_every_frame_with_augmentations(act_runs, root):
    a = read_record(act_runs / "a.jsonl")
    assert [r["step"] for r in a] == list(range(1, 13))
    assert all(math.isfinite(r["loss"][0]) and r["loss"][0] > 0 for r in a)
    epoch0 = [i for r in a if r["epoch"] == 0 for i in r["index"]]
    assert sorted(epoch0) == dataset_indices(root), "epoch 0 must be every frame exactly once"


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


def test_lerobots_own_loaders_take_the_checkpoint(act_runs, lerobot_python, hf_home, root):
    """from_pretrained + the saved processors (what lerobot-eval loads), then an action for a sample that lerobot's
    own LeRobotDataset reads."""
    script = f"""
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
path = {str(act_runs / "b" / "checkpoints" / "last" / "pretrained_model")!r}
cfg = PreTrainedConfig.from_pretrained(path)
policy = get_policy_class(cfg.type).from_pretrained(path).eval()
pre, post = make_pre_post_processors(cfg, pretrained_path=path)
sample = LeRobotDataset("local/tiny", root={str(root)!r})[5]
batch = {{k: v.unsqueeze(0) if isinstance(v, torch.Tensor) else [v] for k, v in sample.items()}}
with torch.no_grad():
    action = post(policy.select_action(pre(batch)))
print("action", tuple(action.shape), bool(torch.isfinite(action).all()))
"""
    proc = subprocess.run(
        [lerobot_python, "-c", script],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "action (1, 6) True" in proc.stdout, proc.stdout[-2000:]


def test_diffusion_trains_on_a_weighted_mixture_with_its_aggregated_stats(
    lerobot_python, hf_home, root, root2, tmp_path
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
            f"--dataset.root=[{root},{root2}]",
            "--robostream.weights=[0.7,0.3]",
            "--batch_size=8",
            "--num_workers=1",
            "--dataloader_multiprocessing_context=fork",
            "--steps=4",
            "--save_freq=4",
            f"--output_dir={out}",
            f"--robostream.record={tmp_path / 'mix.jsonl'}",
        ],
    )
    record = read_record(tmp_path / "mix.jsonl")
    assert [r["step"] for r in record] == [1, 2, 3, 4] and all(math.isfinite(r["loss"][0]) for r in record)
    assert {s for r in record for s in r["dataset_index"]} == {0, 1}
    # lerobot's aggregation with each source counted by the samples it gives an epoch: 0.7 and 0.3 of 49 + 31
    stats = [json.loads((r / "meta" / "stats.json").read_text()) for r in (root, root2)]
    counts = np.array([56, 24])
    expected = sum(np.array(s["action"]["mean"]) * n for s, n in zip(stats, counts)) / counts.sum()
    saved = read_normalizer_mean(out / "checkpoints" / "000004" / "pretrained_model", "action")
    np.testing.assert_allclose(saved, expected, rtol=1e-6)


def read_normalizer_mean(model_dir: Path, key: str) -> np.ndarray:
    """The normaliser's `<key>.mean` from the preprocessor's saved state (safetensors, read without torch)."""
    state = next(model_dir.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    raw = state.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    t = header[f"{key}.mean"]
    data = raw[8 + size + t["data_offsets"][0] : 8 + size + t["data_offsets"][1]]
    return np.frombuffer(data, dtype={"F32": np.float32, "F64": np.float64}[t["dtype"]])


def test_map_style_resume_after_sigkill_is_exact(lerobot_python, hf_home, root, tmp_path):
    """lerobot's data path (EpisodeAwareSampler, its resume arithmetic) with robostream's LeRobotDataset, resumed
    in the second epoch (49 frames, 7 steps an epoch; checkpoint 8): accelerate's loader sets its own pass count
    as the sampler's epoch, which must not send a resumed run back to epoch 0's order."""
    args = ["--batch_size=8", "--num_workers=0"]
    train(lerobot_python, hf_home, single(root, tmp_path / "a", tmp_path / "a.jsonl", 14, *args))
    train_until_killed(
        lerobot_python,
        hf_home,
        single(root, tmp_path / "b", tmp_path / "b.jsonl", 14, *args),
        tmp_path / "b.jsonl",
        after_steps=9,
    )
    train(lerobot_python, hf_home, resume(tmp_path / "b"))
    a = read_record(tmp_path / "a.jsonl")
    for epoch in (0, 1):
        assert sorted(i for r in a if r["epoch"] == epoch for i in r["index"]) == dataset_indices(root)
    assert [r["index"] for r in a if r["epoch"] == 0] != [r["index"] for r in a if r["epoch"] == 1]
    assert_resumed_exactly(
        a,
        read_record(tmp_path / "b.jsonl"),
        tmp_path / "a" / "checkpoints" / "000014" / WEIGHTS,
        tmp_path / "b" / "checkpoints" / "000014" / WEIGHTS,
    )


def test_two_processes_resume_exactly_and_elastically_on_one(lerobot_python, hf_home, root, tmp_path):
    """torchrun (gloo): killed after step 5 and resumed on 2 processes: exact. The same checkpoint resumed on one
    process: the rest of epoch 0 is exactly the samples the 2-process run had left (each once), in other batches
    (the layout changed, so the batches' composition and the float sums differ: not bit for bit)."""
    # forked workers (lerobot's default, spawn, is trained by the language test): 4 runs x 2 ranks start workers
    args = [
        "--dataset.streaming=true",
        "--batch_size=4",
        "--num_workers=1",
        "--dataloader_multiprocessing_context=fork",
    ]
    train(lerobot_python, hf_home, single(root, tmp_path / "a", tmp_path / "a.jsonl", 8, *args), processes=2)
    train_until_killed(
        lerobot_python,
        hf_home,
        single(root, tmp_path / "b", tmp_path / "b.jsonl", 8, *args),
        tmp_path / "b.jsonl",
        after_steps=5,
        processes=2,
    )
    # B's checkpoint 4 as it was before B resumed (B overwrites `last`), resumed on ONE process below
    shutil.copytree(tmp_path / "b" / "checkpoints" / "000004", tmp_path / "c" / "checkpoints" / "000004")
    os.symlink("000004", tmp_path / "c" / "checkpoints" / "last")
    train(lerobot_python, hf_home, resume(tmp_path / "b"), processes=2)
    a = read_record(tmp_path / "a.jsonl")
    # 49 frames: 2 ranks x 4 samples per step, the epoch's last step 2 x 1 (ranks padded to equal counts)
    assert [len(r["index"]) for r in a] == [8] * 6 + [2, 8] and all(len(r["loss"]) == 2 for r in a)
    assert_resumed_exactly(
        a,
        read_record(tmp_path / "b.jsonl"),
        tmp_path / "a" / "checkpoints" / "000008" / WEIGHTS,
        tmp_path / "b" / "checkpoints" / "000008" / WEIGHTS,
    )

    train(
        lerobot_python,
        hf_home,
        [
            *resume(tmp_path / "c"),
            f"--output_dir={tmp_path / 'c'}",
            "--batch_size=8",
            f"--robostream.record={tmp_path / 'c.jsonl'}",
        ],
    )
    c = read_record(tmp_path / "c.jsonl")
    assert [r["step"] for r in c] == [5, 6, 7, 8] and all(len(r["loss"]) == 1 for r in c)
    before = {i for r in a if r["epoch"] == 0 and r["step"] <= 4 for i in r["index"]}
    left_a = {i for r in a if r["epoch"] == 0 and r["step"] > 4 for i in r["index"]}
    left_c = [i for r in c if r["epoch"] == 0 for i in r["index"]]
    # what A had left, without the samples 2 ranks repeat to stay equal (one rank needs no padding)
    assert len(left_c) == len(set(left_c)) and set(left_c) == left_a - before, "the rest of epoch 0 on one process"
    assert before | set(left_c) == set(dataset_indices(root))


BAD_FLAGS = r"""
import json, sys
from robostream.lerobot.train import main
base = ["--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false", "--steps=1", "--dataset.streaming=true"]
results = {}
for name, args in json.loads(sys.argv[1]).items():
    sys.argv = ["robostream train", *base, *args]
    try:
        main()
        results[name] = "no error"
    except SystemExit as exc:
        results[name] = f"SystemExit {exc.code}"
    except Exception as exc:
        results[name] = f"{type(exc).__name__}: {exc} {getattr(exc, '__notes__', '')}"
print(json.dumps(results))
"""


def test_bad_flags_are_refused_naming_what_is_wrong(lerobot_python, hf_home, root, root2, tmp_path):
    """lerobot's error style: the exception (a ValueError, or draccus's usage error) names the flag or key; nothing
    is trained or written."""
    renamed = tmp_path / "renamed"
    shutil.copytree(root2, renamed)
    for name in ("info.json", "stats.json"):  # the same data under another state key: strict mixtures refuse it
        path = renamed / "meta" / name
        doc = json.loads(path.read_text())
        features = doc["features"] if name == "info.json" else doc
        features["observation.pressure"] = features.pop("observation.state")
        path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps([{"root": str(root), "read_options": {"cache_size": 1}}]))
    cases = {
        "missing_root": ["--dataset.repo_id=local/x", f"--dataset.root={tmp_path / 'nowhere'}"],
        "weights": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{root},{root2}]",
            "--robostream.weights=[0.5,0.3,0.2]",
        ],
        "weights_one_dataset": ["--dataset.repo_id=local/a", f"--dataset.root={root}", "--robostream.weights=[1]"],
        "strict": ["--dataset.repo_id=[local/a,local/b]", f"--dataset.root=[{root},{renamed}]"],
        "choice": ["--dataset.repo_id=local/a", f"--dataset.root={root}", "--robostream.batching=sorted"],
        "map_style_mixture": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{root},{root2}]",
            "--dataset.streaming=false",
        ],
        "mixture_and_root": [
            "--dataset.repo_id=mix",
            f"--robostream.mixture={tmp_path / 'mix.yaml'}",
            f"--dataset.root={root}",
        ],
        "video_backend": ["--dataset.repo_id=local/a", f"--dataset.root={root}", "--dataset.video_backend=decord"],
        "streaming_option": [
            "--dataset.repo_id=local/a",
            f"--dataset.root={root}",
            "--dataset.streaming=false",
            "--robostream.pool_size=4",
        ],
        "mixture_option": ["--dataset.repo_id=local/a", f"--dataset.root={root}", "--robostream.batching=stratified"],
        # issue 32: batch 0 spun forever over empty streaming epochs, -3 was a bare islice error
        "batch_zero": ["--dataset.repo_id=local/a", f"--dataset.root={root}", "--batch_size=0"],
        "batch_negative": [
            "--dataset.repo_id=local/a",
            f"--dataset.root={root}",
            "--batch_size=-3",
            "--dataset.streaming=false",
        ],
        "zero_weights": [
            "--dataset.repo_id=[local/a,local/b]",
            f"--dataset.root=[{root},{root2}]",
            "--robostream.weights=[0,0]",
        ],
        "read_options_key": ["--dataset.repo_id=mix", f"--robostream.mixture={options_file}"],
    }
    cases = {k: [*v, f"--output_dir={out / k}"] for k, v in cases.items()}
    proc = subprocess.run(
        [lerobot_python, "-c", BAD_FLAGS, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "nowhere: dataset root does not exist" in got["missing_root"]
    assert "--robostream.weights has 3 values [0.5, 0.3, 0.2] but --dataset.repo_id names 2 sources" in got["weights"]
    assert "names one dataset" in got["weights_one_dataset"]
    assert "feature 'observation.pressure' is in source" in got["strict"] and "--robostream.mixture" in got["strict"]
    assert got["choice"] == "SystemExit 2" and "invalid choice: 'sorted'" in proc.stderr
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


RESUME_CASES = r"""
import json, sys
from robostream.lerobot.train import main
results = {}
for name, args in json.loads(sys.argv[1]).items():
    sys.argv = ["robostream train", "--resume=true", *args]
    try:
        main()
        results[name] = "no error"
    except Exception as exc:
        results[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(results))
"""


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
        cases[name] = [f"--config_path={checkpoint / 'pretrained_model' / 'train_config.json'}"]
    cases["resumed_map_style"] += ["--dataset.streaming=false", "--robostream.augment_on=device"]
    proc = subprocess.run(
        [lerobot_python, "-c", RESUME_CASES, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
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


EMPTY_EPOCHS = r"""
import sys
from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.lerobot.checkpoint import Position
from robostream.lerobot.data import TrainingData
from robostream.lerobot.train import batches
# rank 0 of 100 consumers of a 49-sample epoch, each given as many samples as the one with the fewest: none
dataset = StreamingLeRobotDataset(
    root=sys.argv[1], rank=0, world_size=100, streams=StreamOptions(canonical_streams=1, uneven="drop")
)
data = TrainingData(dataset, StreamingDataLoader(dataset, batch_size=4), dataset.meta, {}, sampler=None,
                    device_augment=None)
for resumed in (False, True):
    try:
        next(batches(data, Position(), resumed=resumed))
    except ValueError as exc:
        print(exc)
"""


def test_an_epoch_without_a_batch_is_an_error_not_an_endless_loop(lerobot_python, hf_home, root):
    """The training loop over epochs spun forever when every epoch was empty (issue 32: --batch_size=0, now
    refused at parse; still reachable with --robostream.uneven=drop and more processes than samples). A resumed
    run's first pass may be empty (saved after its epoch's last batch): then the next epoch is the error."""
    proc = subprocess.run(
        [lerobot_python, "-c", EMPTY_EPOCHS, str(root)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh, resumed = proc.stdout.strip().splitlines()[-2:]
    assert fresh.startswith("epoch 0 gave no batch to train on (49 samples in 4 episodes; --robostream.uneven=drop")
    assert resumed.startswith("epoch 1 gave no batch to train on")


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
    train(lerobot_python, hf_home, single(root, tmp_path / "out", tmp_path / "run.jsonl", 3, *args))
    steps = read_record(tmp_path / "run.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3] and all(math.isfinite(r["loss"][0]) for r in steps)


DEPTH_BATCH = r"""
import json, sys
import torch
from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.data import make_training_data
from robostream.lerobot.train import make_processors, to_device
from lerobot.policies import make_policy
cfg = RobostreamTrainConfig.from_pretrained(sys.argv[1])
data = make_training_data(cfg, device=torch.device("cpu"), policy_config=cfg.policy)
policy = make_policy(cfg=cfg.policy, ds_meta=data.meta)
pre, _ = make_processors(cfg, policy, data.meta.stats, torch.device("cpu"))
batch = pre(to_device(next(iter(data.loader)), data.meta.camera_keys, torch.device("cpu"), None, 0))
depth = batch[sys.argv[2]]
print(json.dumps({"dtype": str(depth.dtype), "shape": list(depth.shape), "min": depth.min().item(),
                  "max": depth.max().item(), "whole": bool(torch.equal(depth, depth.round())),
                  "inputs": sorted(policy.config.input_features)}))
"""


def test_act_trains_on_a_depth_dataset_and_resumes_exactly(lerobot_python, hf_home, tmp_path):
    """lerobot 0.6.1's depth camera (tests/compat/lerobot_depth.py: lerobot's writer, HEVC gray12le, 2 RGB cameras,
    a string feature) streamed to ACT: trains and resumes exactly after SIGKILL. ACT's ResNet takes 3-channel
    images (given the 1-channel depth map it fails in its first conv, in lerobot too), so the depth camera is left
    out of the policy's inputs with lerobot's own `--policy.input_features` (the dataset's other inputs); the data
    path still carries it: the first batch of the saved configuration's data, through robostream train's
    to_device and the saved run's preprocessor, holds the depth map as float32 (B, 1, H, W) in whole mm
    (--dataset.depth_output_unit's default), not normalised."""
    from tests.compat.test_lerobot_compat import HERE as COMPAT
    from tests.lerobot_env import run

    root = tmp_path / "ds"
    run(lerobot_python, hf_home, [str(COMPAT / "lerobot_depth.py"), str(root), "--write", "--hf-home", str(hf_home)])
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

    train(lerobot_python, hf_home, depth_run("a"))
    train_until_killed(lerobot_python, hf_home, depth_run("b"), tmp_path / "b.jsonl", after_steps=5)
    train(lerobot_python, hf_home, resume(tmp_path / "b"))
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
    proc = subprocess.run(
        [lerobot_python, "-c", DEPTH_BATCH, str(saved), depth],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=command_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["inputs"] == sorted(inputs) and depth not in got["inputs"]
    assert (got["dtype"], got["shape"], got["whole"]) == ("torch.float32", [8, 1, 32, 48], True), got
    assert 10.0 <= got["min"] < got["max"] <= 10000.0, got
