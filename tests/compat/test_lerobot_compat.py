"""Opt-in compatibility tests against the real `lerobot` package (LeRobot v3.0 datasets, both directions).

lerobot lives in its own interpreter (it pins its own torch), so the reference side runs in subprocesses:
  * lerobot_make_dataset.py writes a dataset with lerobot's writer;
  * lerobot_dump.py loads a dataset with lerobot's LeRobotDataset and dumps samples to .npz.
robostream's `robostream.datasets.map_style.LeRobotDataset` must then return, for every dumped position, the same
keys with the same dtype, shape and values (videos exactly equal when both sides decode with torchcodec), the same
`<key>_is_pad`, the same `task` string and the same len(dataset).

Enable with:  ROBOSTREAM_LEROBOT_PYTHON=/path/to/python-with-lerobot  python -m pytest tests/compat
Every test skips when the variable is unset or that interpreter cannot `import lerobot`. The subprocesses are
offline (HF_HUB_OFFLINE=1) with HF_HOME in a pytest temp dir.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.lerobot_env import run

HERE = Path(__file__).resolve().parent
# Tolerance on decoded frames ONLY when one side does not decode with torchcodec (then decoders may differ).
NON_TORCHCODEC_ATOL = 2 / 255

# lerobot_make_dataset.py writes fps 10 with cameras "front" (window of 3) and "wrist" (window of length 1).
LEROBOT_DELTA = {
    "observation.images.front": [-0.2, -0.1, 0.0],
    "observation.images.wrist": [0.0],
    "action": [0.0, 0.1, 0.2, 0.3],
    "observation.state": [-0.1, 0.0],
}
# robostream's synth writes fps 20 with cameras cam0 (window of 3) and cam1 (window of length 1).
SYNTH_DELTA = {
    "observation.images.cam0": [-0.1, -0.05, 0.0],
    "observation.images.cam1": [0.0],
    "action": [0.0, 0.05, 0.1, 0.15],
    "observation.state": [-0.05, 0.0],
}


# -- the lerobot interpreter (fixtures hf_home and lerobot_python: tests/conftest.py) ------------------------------
def _run_lerobot(python: str, hf_home: Path, script: str, *args: str) -> str:
    return run(python, hf_home, [str(HERE / script), *args, "--hf-home", str(hf_home)])


# -- positions and configurations ----------------------------------------------------------------------------
def _episode_lengths(root: Path) -> dict[int, int]:
    from robostream.format.metadata import load_metadata

    eps = load_metadata(root).episodes
    return {int(e): int(n) for e, n in zip(eps.episode_index, eps.length)}


def _edge_positions(lengths: dict[int, int], episodes: list[int] | None) -> list[int]:
    """Positions at each selected episode's first, second, middle and last frame (dataset order = sorted)."""
    chosen = sorted(lengths) if episodes is None else sorted(set(episodes))
    positions, start = set(), 0
    for e in chosen:
        n = lengths[e]
        positions |= {start, min(start + 1, start + n - 1), start + n // 2, start + n - 1}
        start += n
    return sorted(positions)


def _specs(lengths: dict[int, int], delta: dict[str, list[float]], subset: list[int]) -> list[dict[str, Any]]:
    specs = [
        {"name": "nodelta", "delta": None, "episodes": None},
        {"name": "delta", "delta": delta, "episodes": None},
        {"name": "episodes_delta", "delta": delta, "episodes": subset},
        {"name": "episodes_nodelta", "delta": None, "episodes": subset[:1]},
    ]
    for s in specs:
        s["indices"] = _edge_positions(lengths, s["episodes"])
    return specs


SPEC_NAMES = ["nodelta", "delta", "episodes_delta", "episodes_nodelta"]


def _dump(python: str, hf_home: Path, root: Path, out: Path, specs: list[dict[str, Any]]) -> dict[str, Any]:
    _run_lerobot(python, hf_home, "lerobot_dump.py", str(root), str(out), "--spec-json", json.dumps(specs))
    with np.load(out) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    return {"root": root, "specs": {s["name"]: s for s in specs}, "arrays": arrays, "meta": meta}


@pytest.fixture(scope="session")
def lerobot_written(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Dataset written by lerobot: 5 episodes, tiny file limits and chunks_size=2 -> several data and video files
    per camera spread over chunk-000.. chunk-00N, then dumped by lerobot."""
    tmp = tmp_path_factory.mktemp("lerobot_written")
    root = tmp / "ds"
    _run_lerobot(
        lerobot_python,
        hf_home,
        "lerobot_make_dataset.py",
        str(root),
        "--episodes",
        "5",
        "--data-mb",
        "0.004",
        "--video-mb",
        "0.02",
        "--chunks-size",
        "2",
    )
    lengths = _episode_lengths(root)
    return _dump(lerobot_python, hf_home, root, tmp / "dump.npz", _specs(lengths, LEROBOT_DELTA, [3, 1]))


@pytest.fixture(scope="session")
def robostream_written(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Dataset written by robostream's synth (AV1, several data and video files), then dumped by lerobot."""
    from robostream.synth import SynthConfig, generate

    tmp = tmp_path_factory.mktemp("robostream_written")
    config = SynthConfig(
        episodes=5,
        cameras=2,
        height=64,
        width=64,
        episode_length=24,
        state_dim=6,
        data_file_mb=0.008,
        video_file_mb=0.03,
    )
    root = generate(tmp / "ds", config)
    lengths = _episode_lengths(root)
    # episode 4 switches task half-way (per-frame tasks); its middle position is among the dumped ones.
    return _dump(lerobot_python, hf_home, root, tmp / "dump.npz", _specs(lengths, SYNTH_DELTA, [4, 1]))


# -- comparison ----------------------------------------------------------------------------------------------
def _both_torchcodec(lerobot_backend: str | None, ds: Any) -> bool:
    from robostream.video.decoder import default_backend

    ours = getattr(ds.cameras, "backend", None) or default_backend()
    return lerobot_backend == "torchcodec" and ours == "torchcodec"


def _compare(side: dict, name: str) -> list[str]:
    from robostream.datasets.map_style import LeRobotDataset

    spec, meta, arrays = side["specs"][name], side["meta"][name], side["arrays"]
    ds = LeRobotDataset(root=side["root"], delta_timestamps=spec["delta"], episodes=spec["episodes"])
    exact_video = _both_torchcodec(meta["video_backend"], ds)
    cameras = set(ds.meta.camera_keys)
    problems = []
    if len(ds) != meta["len"]:
        problems.append(f"len: lerobot {meta['len']} vs robostream {len(ds)}")
    for pos in meta["positions"]:
        listing = meta["listing"][str(pos)]
        got = ds[pos]
        extra = sorted(set(got) - set(listing))
        if extra:
            problems.append(f"[{pos}] keys only in robostream: {extra}")
        for key, info in listing.items():
            where = f"[{pos}] {key}"
            if key not in got:
                problems.append(f"{where}: missing in robostream")
                continue
            ref, val = arrays[f"{name}/{pos}/{key}"], got[key]
            if info["type"] == "str":
                if not isinstance(val, str) or val != str(ref):
                    problems.append(f"{where}: lerobot {str(ref)!r} vs robostream {val!r}")
                continue
            if not isinstance(val, torch.Tensor):
                problems.append(f"{where}: lerobot {info['type']} vs robostream {type(val).__name__}")
                continue
            val_np = val.detach().cpu().numpy()
            if val_np.dtype != ref.dtype:
                problems.append(f"{where}: dtype lerobot {info['dtype']} ({ref.dtype}) vs robostream {val.dtype}")
                continue
            if val_np.shape != ref.shape:
                problems.append(f"{where}: shape lerobot {list(ref.shape)} vs robostream {list(val_np.shape)}")
                continue
            if key in cameras:
                if np.array_equal(val_np, ref):
                    continue
                diff = np.abs(val_np.astype(np.float64) - ref.astype(np.float64))
                msg = (
                    f"{where}: video frames differ, max abs diff {diff.max():.6g}, "
                    f"mean {diff.mean():.3g}, {np.count_nonzero(diff)}/{diff.size} elements"
                )
                if exact_video or diff.max() > NON_TORCHCODEC_ATOL:
                    problems.append(msg + (" (both torchcodec)" if exact_video else ""))
            elif not torch.equal(val, torch.from_numpy(ref)):
                problems.append(f"{where}: values lerobot {ref.tolist()} vs robostream {val_np.tolist()}")
    return problems


def _report(problems: list[str], side: dict, name: str) -> str:
    spec = side["specs"][name]
    head = (
        f"{len(problems)} discrepancies vs lerobot {side['meta'][name]['lerobot_version']} "
        f"(root={side['root']}, delta={spec['delta']}, episodes={spec['episodes']}):"
    )
    return "\n".join([head, *problems[:60], *(["..."] if len(problems) > 60 else [])])


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_lerobot_written_dataset_loads_like_lerobot(lerobot_written: dict, name: str) -> None:
    problems = _compare(lerobot_written, name)
    assert not problems, _report(problems, lerobot_written, name)


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_robostream_written_dataset_loads_in_lerobot_identically(robostream_written: dict, name: str) -> None:
    problems = _compare(robostream_written, name)
    assert not problems, _report(problems, robostream_written, name)


def test_lerobot_written_dataset_has_several_files_per_camera(lerobot_written: dict) -> None:
    """Guard: the fixture really exercises several data files, video files per camera and chunk directories."""
    root = lerobot_written["root"]
    assert len(list((root / "data").glob("chunk-*/file-*.parquet"))) >= 2
    assert len(list((root / "data").glob("chunk-*"))) >= 2
    for cam in ("observation.images.front", "observation.images.wrist"):
        assert len(list((root / "videos" / cam).glob("chunk-*/file-*.mp4"))) >= 2, cam


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_same_interpreter_same_samples(lerobot_python: str, hf_home: Path, robostream_written: dict) -> None:
    """In lerobot's own interpreter (its torch and torchcodec) with robostream importable, both packages'
    LeRobotDataset give identical samples at every position, windows included, and the same metadata where lerobot's
    policy factory reads its `ds_meta` (features, fps, camera keys, stats)."""
    repo = str(HERE.parents[1])
    out = run(
        lerobot_python,
        hf_home,
        [
            str(HERE / "same_interpreter.py"),
            str(robostream_written["root"]),
            "--delta-json",
            json.dumps(SYNTH_DELTA),
            "--hf-home",
            str(hf_home),
        ],
        PYTHONPATH=f"{HERE}:{repo}",
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["positions"] > 100 and summary["mismatches"] == [], summary
