"""Opt-in tests of the `lancedb` benchmark peer (robostream/bench/lancedb_peer.py) under its own interpreter.

The peer (lerobot-lancedb's LanceDBDataset) lives in its own environment with its own torch (scripts/setup_lancedb.sh
builds .venv-lancedb), so every test runs probe.py, a short script that loads the peer by path, or lerobot-lancedb's
converter in a subprocess of that interpreter, on a small dataset written by robostream's synth (AV1, several video
files per camera) and converted once with `python -m lerobot_lancedb.convert --root ... --out ...`.

Enable with:  ROBOSTREAM_LANCEDB_PYTHON=.venv-lancedb/bin/python  python -m pytest tests/bench/test_lancedb_peer.py
Every test skips when the variable is unset or that interpreter cannot `import lerobot_lancedb, psutil`. The
subprocesses are offline (HF_HUB_OFFLINE=1) with HF_HOME in a pytest temp dir.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import AV1_CONFIG
from tests.lerobot_env import offline_env, run

ENV_VAR = "ROBOSTREAM_LANCEDB_PYTHON"
REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "robostream" / "bench" / "probe.py"
PEER = REPO / "robostream" / "bench" / "lancedb_peer.py"
LEROBOT_PEER = REPO / "robostream" / "bench" / "lerobot_peer.py"
BATCH_SIZE, NUM_BATCHES, WARMUP_BATCHES, SPLIT_SAMPLES = 4, 3, 2, 16
STEP_S = 1 / AV1_CONFIG.fps  # the av1_root fixture is 20 fps: a window of the current frame and the two before it
WINDOW = [-2 * STEP_S, -STEP_S, 0.0]
CAMERAS = [f"observation.images.cam{i}" for i in range(AV1_CONFIG.cameras)]
WINDOW_DELTA = {**{camera: WINDOW for camera in CAMERAS}, "observation.state": WINDOW}
WINDOW_EPISODES = [1, 4, 6]


@pytest.fixture(scope="session")
def lance_python(hf_home: Path) -> str:
    """The interpreter with lerobot-lancedb (and psutil, which the probe samples memory with)."""
    python = os.environ.get(ENV_VAR)
    if not python:
        pytest.skip(
            f"lancedb peer tests are opt-in: set {ENV_VAR} to a Python interpreter that has lerobot-lancedb "
            "(scripts/setup_lancedb.sh builds .venv-lancedb)"
        )
    try:
        proc = subprocess.run(
            [python, "-c", "import lerobot_lancedb, psutil"],
            capture_output=True,
            text=True,
            timeout=120,
            env=offline_env(hf_home),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{ENV_VAR}={python!r} cannot be run: {exc}")
    if proc.returncode != 0:
        pytest.skip(
            f"{ENV_VAR}={python!r} cannot `import lerobot_lancedb, psutil`: "
            f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return python


@pytest.fixture(scope="session")
def lance_root(lance_python: str, hf_home: Path, av1_root: Path) -> Path:
    """av1_root converted by lerobot-lancedb's own converter, in a sibling folder (as the bench's S3 store wants)."""
    out = av1_root.parent / f"{av1_root.name}_lance"
    run(lance_python, hf_home, ["-m", "lerobot_lancedb.convert", "--root", str(av1_root), "--out", str(out)])
    assert (out / "frames.lance").is_dir() and (out / "videos.lance").is_dir()
    return out


def _params(
    root: Path, lance: Path, delta: dict[str, list[float]] | None, num_workers: int, episodes: list[int] | None
) -> dict[str, Any]:
    return {
        "root": str(root),
        "peer_root": str(lance),
        "read_options": {"storage_options": None},
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
    assert trace["frames_per_sample"] == frames_per_sample
    split = trace["split"]
    assert split["samples"] == SPLIT_SAMPLES and split["batch_size"] == BATCH_SIZE
    assert split["seconds"] > 0 and split["decode_s"] > 0 and split["fetch_s"] > 0
    info = trace["info"]
    assert info["peer"] == "lancedb" and info["uint8"] is True and info["lerobot_lancedb_version"]


def test_single_frame_with_forkserver_workers(
    lance_python: str, hf_home: Path, av1_root: Path, lance_root: Path, tmp_path: Path
) -> None:
    """Current frame of every camera, two workers started as lerobot-lancedb recommends (forkserver)."""
    trace = _probe_trace(lance_python, hf_home, tmp_path, _params(av1_root, lance_root, None, 2, None))
    _check_trace(trace, set(range(AV1_CONFIG.episodes)), frames_per_sample=len(CAMERAS))
    assert trace["info"]["multiprocessing_context"] == "forkserver"


def test_window_in_process_on_selected_episodes(
    lance_python: str, hf_home: Path, av1_root: Path, lance_root: Path, tmp_path: Path
) -> None:
    """A 3-frame window per camera and on the state, no workers, a subset of episodes."""
    trace = _probe_trace(
        lance_python, hf_home, tmp_path, _params(av1_root, lance_root, WINDOW_DELTA, 0, WINDOW_EPISODES)
    )
    _check_trace(trace, set(WINDOW_EPISODES), frames_per_sample=len(CAMERAS) * len(WINDOW))
    assert "multiprocessing_context" not in trace["info"]


SAME_SAMPLES_SCRIPT = """
import importlib.util, json, sys
import torch
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
params = json.loads(sys.argv[3])
lance = load("lancedb_peer", sys.argv[1]).build(params)["loader"]
upstream = load("lerobot_peer", sys.argv[2]).build(params)["loader"]
order = [list(batch) for batch in lance.batch_sampler]
assert order == [list(batch) for batch in upstream.batch_sampler], "not lerobot-train's order"
for lance_batch, upstream_batch, _ in zip(lance, upstream, range(2)):
    for key, value in upstream_batch.items():
        if isinstance(value, torch.Tensor) and key != "bench_probe":
            assert lance_batch[key].dtype == value.dtype and torch.equal(lance_batch[key], value), key
    assert lance_batch["observation.images.cam0"].dtype == torch.uint8
print(json.dumps({"batches": len(order)}))
"""


def test_same_samples_as_the_lerobot_peer(lance_python: str, hf_home: Path, av1_root: Path, lance_root: Path) -> None:
    """The peer draws lerobot-train's order (EpisodeAwareSampler, same seed) and its batches equal the lerobot
    peer's, uint8 frames included (lerobot 0.6.1 is installed beside lerobot-lancedb)."""
    params = json.dumps(_params(av1_root, lance_root, WINDOW_DELTA, 0, None))
    out = run(lance_python, hf_home, ["-c", SAME_SAMPLES_SCRIPT, str(PEER), str(LEROBOT_PEER), params])
    assert json.loads(out.splitlines()[-1])["batches"] > 0


OPTIONS_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("lancedb_peer", sys.argv[1])
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
print(json.dumps([peer.object_store_options(json.loads(options), uri) for options, uri in json.loads(sys.argv[2])]))
"""


def test_fsspec_options_become_object_store_options(lance_python: str, hf_home: Path) -> None:
    cases = [
        (
            {
                "key": "k",
                "secret": "s",
                "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
            },
            "s3://bucket/ds",
        ),
        ({"endpoint_url": "https://minio.example:9000", "anon": True}, "s3://bucket"),
        ({"key": "k", "secret": "s"}, "/local/folder"),
        (None, "s3://bucket"),
    ]
    out = run(
        lance_python, hf_home, ["-c", OPTIONS_SCRIPT, str(PEER), json.dumps([[json.dumps(o), uri] for o, uri in cases])]
    )
    local_endpoint, anonymous, local_root, no_options = json.loads(out.splitlines()[-1])
    assert local_endpoint == {
        "aws_endpoint": "http://127.0.0.1:9000",
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "aws_region": "eu-west-1",
    }
    assert anonymous == {
        "aws_endpoint": "https://minio.example:9000",
        "aws_virtual_hosted_style_request": "false",
        "aws_region": "us-east-1",
        "aws_skip_signature": "true",
    }
    assert local_root is None and no_options is None


def test_bench_reads_the_conversion_from_the_s3_store(
    lance_python: str, av1_root: Path, lance_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`robostream bench --store_api s3 --peer lancedb --peer_root ...`: lance reads its tables from the loopback
    S3 store (object_store options derived from the store's fsspec ones), side by side with robostream's map
    loader reading the LeRobot folder from the same store."""
    from robostream.cli import main

    for name, value in offline_env(tmp_path / "hf").items():
        if name.startswith(("HF_", "PYTHONNOUSERSITE")):
            monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                str(av1_root),
                "--mode",
                "single",
                "--loader",
                "map",
                "--peer",
                "lancedb",
                "--peer_python",
                lance_python,
                "--peer_root",
                str(lance_root),
                "--store_api",
                "s3",
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
    [peer_file] = out.glob("*_lancedb_single_*.json")
    result = json.loads(peer_file.read_text())
    assert result["metrics"]["samples"] == NUM_BATCHES * BATCH_SIZE
    assert result["metrics"]["store"]["requests"] > 0  # it read the store, not the local folder
    assert result["info"]["peer"] == "lancedb" and result["info"]["uri"].startswith("s3://")
    assert "aws_endpoint" in result["info"]["storage_options"]
