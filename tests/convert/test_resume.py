"""kill -9 at every phase of a conversion, then the same command again: identical output, nothing left over.

Crash points (robostream/convert/faults.py) SIGKILL the whole `robostream convert` process group (the command and
its workers) or one worker at an exact instant; the rerun is a fresh process, as after a real crash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robostream.convert.compare import compare_datasets
from robostream.convert.faults import ENV_VAR, MARK_VAR
from tests.helpers import convert_args, copy_tree, run_cli, tree_listing


def kill_env(tmp_path: Path, spec: str) -> dict[str, str]:
    return {ENV_VAR: spec, MARK_VAR: str(tmp_path / "killed")}


@pytest.mark.parametrize(
    "point", ["planned", "task-written", "task-published", "task-done", "metadata-written", "swap-half"]
)
def test_kill_9_of_the_run_then_rerun_finishes_with_identical_output(
    point: str, v21_root: Path, reference: Path, tmp_path: Path
):
    root = copy_tree(v21_root, tmp_path / "ds")
    before = tree_listing(root)
    args = convert_args(root, "--workers", "2")
    killed = run_cli("convert", *args, env=kill_env(tmp_path, f"{point}:run"))
    assert killed.returncode == -9, killed.stderr
    assert (tmp_path / "killed").exists()
    resumed = run_cli("convert", *args)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert compare_datasets(root, reference) == []
    assert tree_listing(tmp_path / "ds_old") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ds_old", "killed"]  # no work dir, no temp files
    if point == "planned":
        assert "resuming" not in resumed.stderr and summary["files_resumed"] == 0
    elif point in ("task-written", "task-published", "task-done"):
        assert "resuming" in resumed.stderr
        assert summary["files_resumed"] < summary["files"]  # only unfinished files were redone
    elif point == "metadata-written":
        assert summary["files_resumed"] == summary["files"]
    else:
        assert summary["resumed"] == "swap"


def test_a_killed_worker_is_replaced_and_the_run_finishes(v21_root: Path, reference: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = run_cli(
        "convert",
        *convert_args(v21_root, "--workers", "2", "--out", str(out)),
        env=kill_env(tmp_path, "task-written:process"),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "killed").exists()
    assert compare_datasets(out, reference) == []


def test_a_file_that_keeps_failing_fails_the_run_naming_it_and_a_rerun_after_the_fix_finishes(
    v21_root: Path, reference: Path, tmp_path: Path
):
    root = copy_tree(v21_root, tmp_path / "ds")
    args = convert_args(root, "--workers", "2", "--out", str(tmp_path / "out"))
    assert run_cli("convert", *args, "--dry-run").returncode == 0  # planned: sizes recorded
    victim = root / "videos/chunk-000/observation.images.cam1/episode_000003.mp4"
    original = victim.read_bytes()
    victim.write_bytes(original + b"\0")
    failed = run_cli("convert", *args)
    assert failed.returncode == 2
    assert "failed 3 times" in failed.stderr and str(victim) in failed.stderr and "changed" in failed.stderr
    assert not (tmp_path / "out").exists()
    victim.write_bytes(original)
    assert run_cli("convert", *args).returncode == 0
    assert compare_datasets(tmp_path / "out", reference) == []


def test_two_commands_sharing_the_work_dir_convert_together(v21_root: Path, reference: Path, tmp_path: Path):
    """Two `robostream convert` commands (as on two machines sharing the folder) on one conversion: both exit 0,
    the files are split between them by the leases, one finalizes, the other reports it (or, when it starts after
    the first finished, as on a loaded machine, finds the finished conversion and does nothing)."""
    import os
    import subprocess
    import sys

    from tests.helpers import REPO

    args = [
        sys.executable,
        "-m",
        "robostream.cli",
        "convert",
        *convert_args(v21_root, "--workers", "1", "--out", str(tmp_path / "out")),
    ]
    runs = [
        subprocess.Popen(
            args, cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=240) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert sum(bool(s.get("finished_by_another_process") or s.get("already_converted")) for s in summaries) <= 1
    assert compare_datasets(tmp_path / "out", reference) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_command_after_the_conversion_finished_does_nothing(v21_root: Path, reference: Path, tmp_path: Path):
    """A late command of a finished conversion (a SLURM array's straggler, a rerun) finds the result and exits 0
    without touching it; a v3.0 folder that is not this input's conversion is still refused."""
    args = convert_args(v21_root, "--workers", "1", "--out", str(tmp_path / "out"))
    assert run_cli("convert", *args).returncode == 0
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")}
    again = run_cli("convert", *args)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["already_converted"]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == before
    assert compare_datasets(tmp_path / "out", reference) == []
    info = tmp_path / "out" / "meta" / "info.json"
    doc = json.loads(info.read_text())
    info.write_text(json.dumps({**doc, "total_frames": doc["total_frames"] + 1}))
    other = run_cli("convert", *args)
    assert other.returncode == 2 and "already exists" in other.stderr
