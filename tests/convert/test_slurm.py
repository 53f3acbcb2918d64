"""The SLURM path through datatrove's real SlurmPipelineExecutor, with a fake `sbatch` that records the job scripts
and fake `srun`/`scontrol`; the test then runs the recorded array tasks (two at once, sharing the work dir, as two nodes
would) and the dependent finalize job, and checks the output against the local conversion."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from robostream.convert import EngineOptions, convert
from robostream.convert.compare import compare_datasets
from tests.helpers import DATA_MB, VIDEO_MB

pytest.importorskip("datatrove", reason="datatrove is a test dependency (pip install -e .[test])")

FAKE_SBATCH = """#!/bin/bash
# record the submitted script and its arguments, answer like sbatch
n=$(ls "{calls}" | wc -l)
mkdir -p "{calls}/$n"
printf '%s\\n' "$@" > "{calls}/$n/args"
cp "${{@: -1}}" "{calls}/$n/script.sh"
echo "Submitted batch job $((1000 + n))"
"""
FAKE_SCONTROL = """#!/bin/bash
# `scontrol show hostnames LIST`: one node
echo "$3"
"""
FAKE_SRUN = """#!/bin/bash
# run the step in place: drop srun's own options
while [ "$#" -gt 0 ] && [ "$1" != launch_pickled_pipeline ]; do shift; done
exec "$@"
"""


def _jobs(calls: Path) -> list[tuple[list[str], str]]:
    return [
        ((calls / d / "args").read_text().split("\n")[:-1], (calls / d / "script.sh").read_text())
        for d in sorted(os.listdir(calls), key=int)
    ]


def test_slurm_job_array_then_finalize_job_write_what_the_local_pool_writes(
    v21_root: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH.format(calls=calls))
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    out = tmp_path / "out"
    summary = convert(
        v21_root,
        out=out,
        workers=2,
        executor="slurm",
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        engine=EngineOptions(partition="cpu", time="01:00:00"),
        log=lambda line: None,
    )
    assert summary["submitted"] and not out.exists()  # submitted, nothing converted by the submitting process
    jobs = _jobs(calls)
    files_job = next(s for a, s in jobs if "--job-name=robostream-convert" in s)
    finalize_job, finalize_args = next((s, a) for a, s in jobs if "--job-name=robostream-finalize" in s)
    assert re.search(r"#SBATCH --array=0-1", files_job) and "#SBATCH --partition=cpu" in files_job
    assert any(arg.startswith("--dependency=afterok:") for arg in finalize_args)

    env = {**os.environ, "PATH": path, "RUN_OFFSET": "0", "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "1000"}
    array = [
        subprocess.Popen(
            ["bash", "-c", files_job],
            env={**env, "SLURM_ARRAY_TASK_ID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for task in array:
        output, _ = task.communicate(timeout=240)
        assert task.returncode == 0, output[-3000:]
    done = subprocess.run(
        ["bash", "-c", finalize_job],
        env={**env, "SLURM_ARRAY_TASK_ID": "0"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert compare_datasets(out, reference) == []
