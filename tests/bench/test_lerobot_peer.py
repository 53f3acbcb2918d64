"""Opt-in tests of the `lerobot` benchmark peer (robostream/bench/lerobot_peer.py) under lerobot's own interpreter.

The peer runs where lerobot is installed (it pins its own torch), so every test runs probe.py, or a short script
that loads the peer by path, in a subprocess of that interpreter, on a small dataset written by robostream's synth
(AV1, several video files per camera).

Enable with:  ROBOSTREAM_LEROBOT_PYTHON=/path/to/python-with-lerobot  python -m pytest tests/bench/test_lerobot_peer.py
Every test skips when the variable is unset or that interpreter cannot `import lerobot`. The subprocesses are
offline (HF_HUB_OFFLINE=1) with HF_HOME in a pytest temp dir.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from robostream.synth import episode_lengths
from tests.conftest import AV1_CONFIG

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "robostream" / "bench" / "probe.py"
PEER = REPO / "robostream" / "bench" / "lerobot_peer.py"
ENV_VAR = "ROBOSTREAM_LEROBOT_PYTHON"
SUBPROCESS_TIMEOUT_S = 300
BATCH_SIZE, NUM_BATCHES, WARMUP_BATCHES, SPLIT_SAMPLES = 4, 3, 2, 16
# The av1_root fixture is 20 fps: a window of the current frame and the two before it (0.05 s apart).
STEP_S = 1 / AV1_CONFIG.fps
WINDOW = [-2 * STEP_S, -STEP_S, 0.0]
CAMERAS = [f"observation.images.cam{i}" for i in range(AV1_CONFIG.cameras)]
WINDOW_DELTA = {**{camera: WINDOW for camera in CAMERAS}, "observation.state": WINDOW}
WINDOW_EPISODES = [1, 4, 6]


def _offline_env(hf_home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without robostream's Python paths, offline, with a private HF cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HOME=str(hf_home), HF_LEROBOT_HOME=str(hf_home / "lerobot"),
               HF_DATASETS_CACHE=str(hf_home / "datasets"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONNOUSERSITE="1", **extra)
    return env


@functools.cache
def _skip_reason(hf_home: Path) -> str | None:
    python = os.environ.get(ENV_VAR)
    if not python:
        return f"lerobot peer tests are opt-in: set {ENV_VAR} to a Python interpreter that has lerobot"
    try:
        proc = subprocess.run([python, "-c", "import lerobot, psutil"], capture_output=True, text=True,
                              timeout=120, env=_offline_env(hf_home))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{ENV_VAR}={python!r} cannot be run: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"{ENV_VAR}={python!r} cannot `import lerobot, psutil`: {tail}"
    return None


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_home")


@pytest.fixture(scope="session")
def lerobot_python(hf_home: Path) -> str:
    reason = _skip_reason(hf_home)
    if reason:
        pytest.skip(reason)
    return os.environ[ENV_VAR]


def _run(python: str, hf_home: Path, args: list[str], **env: str) -> str:
    proc = subprocess.run([python, *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                          env=_offline_env(hf_home, **env))
    if proc.returncode != 0:
        pytest.fail(f"{python} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")
    return proc.stdout


def _params(root: Path, delta: dict[str, list[float]] | None, num_workers: int,
            episodes: list[int] | None) -> dict[str, Any]:
    return {"root": str(root), "delta_timestamps": delta, "batch_size": BATCH_SIZE, "num_workers": num_workers,
            "prefetch_factor": 2, "seed": 0, "episodes": episodes, "video_backend": None, "pin_memory": False,
            "tolerance_s": 1e-4}


def _probe_trace(python: str, hf_home: Path, tmp: Path, params: dict[str, Any]) -> dict[str, Any]:
    spec = {"factory": f"{PEER}:build", "params": params, "num_batches": NUM_BATCHES,
            "warmup_batches": WARMUP_BATCHES, "duration_s": None, "device": "cpu", "split_samples": SPLIT_SAMPLES}
    (tmp / "spec.json").write_text(json.dumps(spec))
    _run(python, hf_home, [str(PROBE), str(tmp / "spec.json"), str(tmp / "trace.json")])
    return json.loads((tmp / "trace.json").read_text())


def _check_trace(trace: dict[str, Any], episodes: set[int], frames_per_sample: int) -> None:
    records = trace["records"]
    assert len(records) == WARMUP_BATCHES + NUM_BATCHES
    for record in records:
        assert len(record["episodes"]) == BATCH_SIZE
        assert set(record["episodes"]) <= episodes, record["episodes"]
        assert all(seconds > 0 for seconds in record["sample_s"]), record["sample_s"]
        assert record["wait_s"] >= 0
    arrivals = [record["arrival_s"] for record in records]
    assert arrivals == sorted(arrivals)
    assert trace["frames_per_sample"] == frames_per_sample
    assert trace["peak_rss_bytes"] > trace["baseline_rss_bytes"] > 0
    split = trace["split"]
    assert split["samples"] == SPLIT_SAMPLES
    assert split["seconds"] > 0 and split["decode_s"] > 0 and split["fetch_s"] > 0
    assert math.isclose(split["fetch_s"] + split["decode_s"], split["seconds"], rel_tol=1e-9)
    assert math.isclose(split["samples_per_s"], SPLIT_SAMPLES / split["seconds"], rel_tol=1e-9)
    info = trace["info"]
    assert info["peer"] == "lerobot" and info["uint8"] is True and info["lerobot_version"]


def test_single_frame_with_spawned_workers(lerobot_python: str, hf_home: Path, av1_root: Path,
                                           tmp_path: Path) -> None:
    """Current frame of every camera, two spawned workers (lerobot-train's multiprocessing context)."""
    trace = _probe_trace(lerobot_python, hf_home, tmp_path, _params(av1_root, None, 2, None))
    _check_trace(trace, set(range(AV1_CONFIG.episodes)), frames_per_sample=len(CAMERAS))
    assert trace["info"]["multiprocessing_context"] == "spawn"


def test_window_in_process_on_selected_episodes(lerobot_python: str, hf_home: Path, av1_root: Path,
                                                tmp_path: Path) -> None:
    """A 3-frame window per camera and on the state, no workers, a subset of episodes."""
    trace = _probe_trace(lerobot_python, hf_home, tmp_path, _params(av1_root, WINDOW_DELTA, 0, WINDOW_EPISODES))
    _check_trace(trace, set(WINDOW_EPISODES), frames_per_sample=len(CAMERAS) * len(WINDOW))
    assert "multiprocessing_context" not in trace["info"]


BATCHES_SCRIPT = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("lerobot_peer", sys.argv[1])
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
params = json.loads(sys.argv[2])
out = {}
for rank, world in [(0, 1), (0, 2), (1, 2)]:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    out[f"{rank}/{world}"] = [list(batch) for batch in peer.build(params)["loader"].batch_sampler]
print(json.dumps(out))
"""


def test_ranks_take_alternate_batches_of_one_permutation(lerobot_python: str, hf_home: Path,
                                                         av1_root: Path) -> None:
    """WORLD_SIZE > 1: like accelerate's batch sharding, rank r gets batches r, r + W, ... of the same order."""
    params = json.dumps(_params(av1_root, None, 0, None))
    out = json.loads(_run(lerobot_python, hf_home, ["-c", BATCHES_SCRIPT, str(PEER), params]).splitlines()[-1])
    whole = out["0/1"]
    order = [position for batch in whole for position in batch]
    assert sorted(order) == list(range(sum(episode_lengths(AV1_CONFIG)))), "one epoch covers every frame once"
    assert order != sorted(order), "lerobot-train shuffles"
    assert out["0/2"] == whole[0::2] and out["1/2"] == whole[1::2]
