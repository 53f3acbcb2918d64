"""Opt-in tests of the `lerobot` benchmark peer (robostream/bench/lerobot_peer.py) under lerobot's own interpreter.

The peer runs where lerobot is installed (it pins its own torch), so every test runs probe.py, or a short script
that loads the peer by path, in a subprocess of that interpreter, on a small dataset written by robostream's synth
(AV1, several video files per camera).

Enable with:  ROBOSTREAM_LEROBOT_PYTHON=/path/to/python-with-lerobot  python -m pytest tests/bench/test_lerobot_peer.py
Every test skips when the variable is unset or that interpreter cannot `import lerobot`. The subprocesses are
offline (HF_HUB_OFFLINE=1) with HF_HOME in a pytest temp dir.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from robostream.synth import episode_lengths
from tests.helpers import AV1_CONFIG
from tests.lerobot_env import run, skip_reason

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "robostream" / "bench" / "probe.py"
PEER = REPO / "robostream" / "bench" / "lerobot_peer.py"
BATCH_SIZE, NUM_BATCHES, WARMUP_BATCHES, SPLIT_SAMPLES = 4, 3, 2, 16
# The av1_root fixture is 20 fps: a window of the current frame and the two before it (0.05 s apart).
STEP_S = 1 / AV1_CONFIG.fps
WINDOW = [-2 * STEP_S, -STEP_S, 0.0]
CAMERAS = [f"observation.images.cam{i}" for i in range(AV1_CONFIG.cameras)]
WINDOW_DELTA = {**{camera: WINDOW for camera in CAMERAS}, "observation.state": WINDOW}
WINDOW_EPISODES = [1, 4, 6]


@pytest.fixture(scope="session")
def peer_python(lerobot_python: str, hf_home: Path) -> str:
    """lerobot's interpreter, which also needs psutil: the probe samples memory with it."""
    reason = skip_reason(hf_home, ("lerobot", "psutil"))
    if reason:
        pytest.skip(reason)
    return lerobot_python


def _params(
    root: Path, delta: dict[str, list[float]] | None, num_workers: int, episodes: list[int] | None
) -> dict[str, Any]:
    return {
        "root": str(root),
        "delta_timestamps": delta,
        "batch_size": BATCH_SIZE,
        "num_workers": num_workers,
        "prefetch_factor": 2,
        "seed": 0,
        "episodes": episodes,
        "video_backend": None,
        "pin_memory": False,
        "tolerance_s": 1e-4,
    }


def _probe_trace(python: str, hf_home: Path, tmp: Path, params: dict[str, Any]) -> dict[str, Any]:
    spec = {
        "factory": f"{PEER}:build",
        "params": params,
        "num_batches": NUM_BATCHES,
        "warmup_batches": WARMUP_BATCHES,
        "duration_s": None,
        "device": "cpu",
        "split_samples": SPLIT_SAMPLES,
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    run(python, hf_home, [str(PROBE), str(tmp / "spec.json"), str(tmp / "trace.json")])
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


def test_single_frame_with_spawned_workers(peer_python: str, hf_home: Path, av1_root: Path, tmp_path: Path) -> None:
    """Current frame of every camera, two spawned workers (lerobot-train's multiprocessing context)."""
    trace = _probe_trace(peer_python, hf_home, tmp_path, _params(av1_root, None, 2, None))
    _check_trace(trace, set(range(AV1_CONFIG.episodes)), frames_per_sample=len(CAMERAS))
    assert trace["info"]["multiprocessing_context"] == "spawn"


def test_window_in_process_on_selected_episodes(
    peer_python: str, hf_home: Path, av1_root: Path, tmp_path: Path
) -> None:
    """A 3-frame window per camera and on the state, no workers, a subset of episodes."""
    trace = _probe_trace(peer_python, hf_home, tmp_path, _params(av1_root, WINDOW_DELTA, 0, WINDOW_EPISODES))
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


def test_ranks_take_alternate_batches_of_one_permutation(peer_python: str, hf_home: Path, av1_root: Path) -> None:
    """WORLD_SIZE > 1: like accelerate's batch sharding, rank r gets batches r, r + W, ... of the same order."""
    params = json.dumps(_params(av1_root, None, 0, None))
    out = json.loads(run(peer_python, hf_home, ["-c", BATCHES_SCRIPT, str(PEER), params]).splitlines()[-1])
    whole = out["0/1"]
    order = [position for batch in whole for position in batch]
    assert sorted(order) == list(range(sum(episode_lengths(AV1_CONFIG)))), "one epoch covers every frame once"
    assert order != sorted(order), "lerobot-train shuffles"
    assert out["0/2"] == whole[0::2] and out["1/2"] == whole[1::2]


def test_the_streaming_peer_reads_the_hub_store(peer_python: str, tmp_path: Path) -> None:
    """`robostream bench --store_api hub --peer lerobot-stream`: lerobot's StreamingLeRobotDataset streams the
    dataset from the loopback Hub emulator (with latency), side by side with robostream's streaming reader.

    One video file per camera: lerobot 0.6.1's streaming reader asks past the end of a file in the av1_root
    fixture's multi-file layout ("Invalid frame index=30 ...; must be less than 29"), a defect of its own."""
    from robostream.cli import main
    from robostream.synth import SynthConfig, generate

    root = generate(tmp_path / "ds", SynthConfig(episodes=4, cameras=1, height=64, width=64, episode_length=30, seed=2))
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                str(root),
                "--mode",
                "single",
                "--loader",
                "stream",
                "--peer",
                "lerobot-stream",
                "--peer_python",
                peer_python,
                "--store_api",
                "hub",
                "--store_latency_ms",
                "5",
                "--batch_size",
                str(BATCH_SIZE),
                "--num_workers",
                "1",
                "--num_batches",
                str(NUM_BATCHES),
                "--split_samples",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    for loader in ("stream", "lerobot-stream"):
        result = json.loads((out / f"hub5ms_{loader}_single_b{BATCH_SIZE}_w1_cpu.json").read_text())
        assert result["metrics"]["samples"] == NUM_BATCHES * BATCH_SIZE
        assert result["metrics"]["store"]["requests"] > 0  # it read the store, not a local copy
    peer = json.loads((out / f"hub5ms_lerobot-stream_single_b{BATCH_SIZE}_w1_cpu.json").read_text())
    assert peer["info"]["peer"] == "lerobot-stream"
