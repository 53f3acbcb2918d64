"""The serial-chain submitter: pure planning, and submission through a fake `sbatch` executable.

SLURM cannot run here, so the submit path runs a small shell script named `sbatch` from PATH that records its
argv and environment and prints incrementing job ids, like `sbatch --parsable` does.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from robostream.bench.chain import (
    MatrixError,
    SubmitError,
    dry_run_lines,
    load_matrix,
    main,
    parse_job_id,
    plan,
    submit,
    with_dependency,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "benchmarks/slurm/bench_1node.sbatch"


def matrix(**scenario) -> dict:
    """A one-scenario matrix; keyword arguments override the scenario's keys."""
    return {"scenario": [{"name": "rs", "script": SCRIPT, "nodes": 1, **scenario}]}


# --- plan: pure ---------------------------------------------------------------------------------------------------


def test_cartesian_product_order_nodes_first_last_key_fastest():
    jobs = plan(matrix(nodes=[1, 2], env={"MODE": ["single", "sarm"], "LOADER": ["stream", "map"]}))
    assert [(j.argv[3], j.env["MODE"], j.env["LOADER"]) for j in jobs] == [
        (f"--nodes={n}", mode, loader) for n in (1, 2) for mode in ("single", "sarm") for loader in ("stream", "map")
    ]
    assert jobs[0].label == "rs nodes=1 MODE=single LOADER=stream"


def test_scenarios_keep_file_order_and_defaults_apply_to_every_job():
    jobs = plan(
        {
            "defaults": {"sbatch_args": ["--partition=gpu"], "env": {"ROOT": "s3://b/ds", "BATCH_SIZE": 32}},
            "scenario": [
                {
                    "name": "b",
                    "script": "two.sbatch",
                    "nodes": 2,
                    "sbatch_args": ["--time=5"],
                    "env": {"BATCH_SIZE": 8},
                },
                {"name": "a", "script": SCRIPT, "nodes": 1, "env": {"MODE": ["single", "sarm"]}},
            ],
        }
    )
    assert [j.label for j in jobs] == ["b nodes=2", "a nodes=1 MODE=single", "a nodes=1 MODE=sarm"]
    assert jobs[0].argv == (
        "sbatch",
        "--parsable",
        "--job-name=rs-b-2n",
        "--nodes=2",
        "--export=ALL",
        "--partition=gpu",
        "--time=5",
        "two.sbatch",
    )
    assert jobs[0].env == {"ROOT": "s3://b/ds", "BATCH_SIZE": "8"}  # the scenario overrides the default
    assert jobs[2].env == {"ROOT": "s3://b/ds", "BATCH_SIZE": "32", "MODE": "sarm"}
    assert jobs[2].argv[2] == "--job-name=rs-a-1n-sarm" and jobs[2].argv[-1] == SCRIPT


def test_values_with_commas_and_spaces_pass_through_unchanged():
    args = "--peer lerobot --peer_python /opt/v env/bin/python --storage_options a=1,b=2"
    (job,) = plan(matrix(env={"BENCH_ARGS": args}))
    assert job.env["BENCH_ARGS"] == args and "--export=ALL" in job.argv
    assert job.argv[2] == "--job-name=rs-rs-1n"  # fixed values stay out of the job name


def test_dependency_chaining_and_job_id_parsing():
    argv = ("sbatch", "--parsable", "x.sbatch")
    assert with_dependency(argv, None) == list(argv)
    assert with_dependency(argv, "41") == ["sbatch", "--dependency=afterany:41", "--parsable", "x.sbatch"]
    assert parse_job_id("1234\n") == "1234"
    assert parse_job_id("1234;cluster-a\n") == "1234"
    assert parse_job_id("sbatch: warning: x\n1234;c\n") == "1234"
    with pytest.raises(SubmitError, match="no job id"):
        parse_job_id("Submitted batch job 1234")


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"scenario": []}, r"\[\[scenario\]\]"),
        ({"scenarios": [{}]}, "scenarios"),
        (matrix(script=None), r"scenario\[0\] \('rs'\)\.script"),
        (matrix(nodes=0), r"\.nodes"),
        (matrix(nodes=[]), r"\.nodes"),
        (matrix(nodes=True), r"\.nodes"),
        (matrix(env={"MODE": []}), r"\.env\.MODE"),
        (matrix(env={"MODE": {"a": 1}}), r"\.env\.MODE"),
        (matrix(env={"BAD-NAME": "x"}), r"\.env\.BAD-NAME"),
        (matrix(envs={"MODE": "single"}), "envs"),
        (matrix(sbatch_args="--time=5"), r"\.sbatch_args"),
        ({"defaults": {"env": {"MODE": ["single", "sarm"]}}, **matrix()}, r"defaults\.env"),
        ({"defaults": {"nodes": 2}, **matrix()}, r"defaults.*nodes"),
    ],
)
def test_bad_matrix_names_the_key(bad, key):
    with pytest.raises(MatrixError, match=key):
        plan(bad)


def test_example_matrix_plans_ten_jobs():
    jobs = plan(load_matrix(REPO / "benchmarks/slurm/matrix.example.toml"))
    assert len(jobs) == 10  # (1 + 2 nodes) x single/sarm x stream/map, and lerobot x single/sarm
    assert all((REPO / j.argv[-1]).is_file() for j in jobs)
    assert any("--peer lerobot" in j.env.get("BENCH_ARGS", "") for j in jobs)


def test_load_matrix_reports_the_file(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("[[scenario]\n")
    with pytest.raises(MatrixError, match="m.toml: not valid TOML"):
        load_matrix(path)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(matrix()))
    assert plan(load_matrix(path))[0].argv[-1] == SCRIPT


# --- submit: through a fake sbatch executable ---------------------------------------------------------------------

FAKE_SBATCH = """#!/bin/bash
# Records argv (one word per line, then a blank line) and MODE, answers like `sbatch --parsable`.
printf '%s\\n' "$@" >> "$SBATCH_LOG"
printf 'MODE=%s\\n\\n' "${MODE:-}" >> "$SBATCH_LOG"
if [[ -n "${SBATCH_FAIL_ON:-}" && "${MODE:-}" == "$SBATCH_FAIL_ON" ]]; then
    echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
    exit 1
fi
count=$(( $(cat "$SBATCH_COUNTER" 2>/dev/null || echo 100) + 1 ))
echo "$count" > "$SBATCH_COUNTER"
echo "$count;cluster-a"
"""


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch) -> Path:
    """A `sbatch` on PATH; returns the log it writes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_LOG", str(tmp_path / "sbatch.log"))
    monkeypatch.setenv("SBATCH_COUNTER", str(tmp_path / "counter"))
    monkeypatch.delenv("MODE", raising=False)
    return tmp_path / "sbatch.log"


def calls(log: Path) -> list[list[str]]:
    """The recorded sbatch invocations: argv words plus the MODE it saw."""
    return [block.splitlines() for block in log.read_text().strip().split("\n\n")]


def test_submit_chains_each_job_on_the_previous_id(fake_sbatch):
    jobs = plan(matrix(env={"MODE": ["single", "sarm"], "LOADER": "stream"}, nodes=[1, 2]))
    assert submit(jobs) == ["101", "102", "103", "104"]
    recorded = calls(fake_sbatch)
    assert recorded[0] == [*jobs[0].argv[1:], "MODE=single"]  # the first job waits for nothing
    for previous, call, job in zip(["101", "102", "103"], recorded[1:], jobs[1:]):
        assert call == [f"--dependency=afterany:{previous}", *job.argv[1:], f"MODE={job.env['MODE']}"]


def test_submit_after_an_existing_job(fake_sbatch):
    submit(plan(matrix()), after="7")
    assert calls(fake_sbatch)[0][0] == "--dependency=afterany:7"


def test_submit_failure_names_the_scenario_and_sbatch_stderr(fake_sbatch, monkeypatch):
    monkeypatch.setenv("SBATCH_FAIL_ON", "sarm")
    jobs = plan(matrix(env={"MODE": ["single", "sarm", "other"]}))
    with pytest.raises(SubmitError) as error:
        submit(jobs)
    message = str(error.value)
    assert "'rs nodes=1 MODE=sarm'" in message and "Invalid partition name" in message
    assert "already queued: ['101']" in message
    assert len(calls(fake_sbatch)) == 2  # stopped at the refusal


def test_submit_without_sbatch_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SubmitError, match="could not run 'sbatch' for scenario 'rs nodes=1'"):
        submit(plan(matrix()))


def test_submit_rejects_output_without_a_job_id():
    def runner(argv, env):
        return subprocess.CompletedProcess(argv, 0, stdout="Submitted batch job 5\n", stderr="")

    with pytest.raises(SubmitError, match="scenario 'rs nodes=1'.*no job id"):
        submit(plan(matrix()), runner=runner)


def test_dry_run_script_submits_like_submit(fake_sbatch, tmp_path):
    jobs = plan(matrix(env={"MODE": ["single", "sarm"], "BENCH_ARGS": "--a 1,2 --b 'x y'"}))
    script = "\n".join(dry_run_lines(jobs, after="7"))
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], check=True)
    dry = calls(fake_sbatch)
    fake_sbatch.unlink()
    (tmp_path / "counter").unlink()
    submit(jobs, after="7")
    assert dry == calls(fake_sbatch)


def test_main_dry_run_prints_and_submits_nothing(tmp_path, capsys, fake_sbatch):
    path = tmp_path / "m.toml"
    path.write_text(f'[[scenario]]\nscript = "{SCRIPT}"\nnodes = [1, 2]\n')
    assert main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("sbatch --") == 2 and "--dependency=afterany:${JOB1%%;*}" in out
    assert not fake_sbatch.exists()
    assert main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["101\tscenario0 nodes=1", "102\tscenario0 nodes=2"]


def test_main_reports_a_bad_matrix(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text('[[scenario]]\nscript = "x"\nnodes = -1\n')
    assert main([str(path)]) == 1
    assert "scenario[0] ('scenario0').nodes" in capsys.readouterr().err
