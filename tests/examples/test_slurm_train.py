"""examples/slurm/train.sbatch and train_node.sh under fake `srun` and `scontrol` executables on PATH.

SLURM cannot run here, so (as in tests/bench/test_chain.py) small shell scripts stand in for its commands and record
what they were asked: `scontrol show hostnames` splits the node list on commas, `scontrol requeue` records the job
id and the checkpoints present at that moment, and `srun` starts its command once per "node" on this machine with
SLURM_NODEID/SLURM_PROCID set, forwarding USR1 to every process of each task as slurmstepd does (the step's
cgroup). The batch script itself runs under bash with the SLURM variables sbatch would set.

Two kinds of runs: the launch command lines are checked with a recording stand-in for the venv's `python` (no
training); the warning -> checkpoint -> requeue -> resume path runs the real example under the real torchrun, two
"nodes" of one CPU process each meeting in a c10d rendezvous on localhost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.examples import processes
from tests.helpers import read_records

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "examples" / "slurm" / "train.sbatch"
NODE_SCRIPT = REPO / "examples" / "slurm" / "train_node.sh"
JOB_ID = "4242"
RUN_TIMEOUT_S = 240

FAKE_SRUN = r"""#!/bin/bash
# Records argv (one word per line, then a blank line); runs the command once per node (--nodes=N) with the
# variables SLURM sets for each task; forwards USR1/TERM to every process of every task, like slurmstepd; with
# --kill-on-bad-exit=1 a task that fails ends the others (SIGTERM). Exits with the first failing task's status.
printf '%s\n' "$@" >> "$FAKE_LOG/srun.log"
echo >> "$FAKE_LOG/srun.log"
nodes=1
kill_on_bad_exit=0
while [[ "${1:-}" == -* ]]; do
    [[ "$1" == --nodes=* ]] && nodes=${1#--nodes=}
    [[ "$1" == --kill-on-bad-exit=1 ]] && kill_on_bad_exit=1
    shift
done
tree() { local child; for child in $(pgrep -P "$1"); do echo "$child"; tree "$child"; done; }
forward() {
    local task
    for task in "${tasks[@]}"; do kill -"$1" "$task" $(tree "$task") 2>/dev/null || true; done
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
(( kill_on_bad_exit )) && trap 'forward TERM' USR2  # a task failed
failed="$FAKE_LOG/srun.$$.failed"
tasks=()
for ((node = 0; node < nodes; node++)); do
    (
        trap : USR1 TERM  # the wrapper outlives forwarded signals (a trap, not an ignore: the task keeps defaults)
        rc=0
        SLURM_NODEID=$node SLURM_PROCID=$node SLURM_LOCALID=0 SLURM_STEP_NUM_NODES=$nodes "$@" || rc=$?
        if (( rc != 0 )); then
            (set -o noclobber; echo "$rc" > "$failed") 2>/dev/null  # the first failure only
            kill -USR2 $$ 2>/dev/null
        fi
    ) &
    tasks+=($!)
done
for task in "${tasks[@]}"; do
    while kill -0 "$task" 2>/dev/null; do wait "$task" || true; done  # (a trapped signal cuts a wait short)
done
[[ -f "$failed" ]] && exit "$(cat "$failed")"
exit 0
"""

FAKE_SCONTROL = r"""#!/bin/bash
# show hostnames A,B -> one name a line; requeue ID -> recorded with the checkpoints present at that moment.
printf '%s\n' "$*" >> "$FAKE_LOG/scontrol.log"
case "$1 ${2:-}" in
    "show hostnames") tr ',' '\n' <<< "$3" ;;
    "requeue $SLURM_JOB_ID") echo "requeue $2: $(cd "$OUTPUT_DIR" && ls -d checkpoint-* 2>/dev/null | tr '\n' ' ')" \
                                 >> "$FAKE_LOG/requeue.log" ;;
    *) echo "fake scontrol: unexpected arguments: $*" >&2; exit 1 ;;
esac
"""

# Stands in for the venv's python when torchrun itself is not wanted: records its argv, its node and whether it
# was started with USR1 ignored. FAKE_MODE=worker makes it a torchrun with one worker in a session of its own (as
# torchrun starts them) that waits for USR1; FAKE_MODE=stuck never ends by itself.
FAKE_PYTHON = r"""#!{python}
import json, os, signal, subprocess, sys
log = os.environ["FAKE_LOG"]
node = os.environ["SLURM_NODEID"]
with open(f"{{log}}/.python.node{{node}}.json", "w") as f:
    json.dump({{"argv": sys.argv[1:], "usr1_ignored": signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN}}, f)
os.replace(f"{{log}}/.python.node{{node}}.json", f"{{log}}/python.node{{node}}.json")  # whole, for pollers
mode = os.environ.get("FAKE_MODE", "")
if mode == "stuck" or (mode == "node1-fails" and node == "0"):
    while True:
        signal.pause()
if mode == "node1-fails":
    sys.exit(3)
if mode == "worker":
    worker = (
        "import signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\n"  # the trainer overrides the inherited SIG_IGN
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\n"  # held until sigwait: no lost signal
        f"open('{{log}}/worker.ready', 'w').close()\n"
        "signal.sigwait([signal.SIGUSR1])\n"
        f"open('{{log}}/worker.got-usr1', 'w').close()\n")
    sys.exit(subprocess.run([sys.executable, "-c", worker], start_new_session=True).returncode)
"""


def write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def slurm(tmp_path: Path) -> dict:
    """Fake SLURM commands on PATH, a recording fake venv, and the environment sbatch would give a 2-node job."""
    log = tmp_path / "log"
    log.mkdir()
    write_exe(tmp_path / "bin" / "srun", FAKE_SRUN)
    write_exe(tmp_path / "bin" / "scontrol", FAKE_SCONTROL)
    write_exe(tmp_path / "venv" / "bin" / "python", FAKE_PYTHON.format(python=sys.executable))
    # Nothing from an outer SLURM job or distributed run, no network for the real runs.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "TORCHELASTIC_"))
        and k
        not in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "NPROC_PER_NODE",
            "ROOT",
            "OUTPUT_DIR",
            "TRAIN_ARGS",
            "VENV",
            "STOP_TIMEOUT",
        )
    }
    env.update(
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        FAKE_LOG=str(log),
        SLURM_JOB_ID=JOB_ID,
        SLURM_JOB_NAME="rs-train",
        SLURM_JOB_NODELIST="node-a,node-b",
        SLURM_NNODES="2",
        SLURM_CPUS_ON_NODE="4",
        SLURM_GPUS_ON_NODE="2",
        ROOT="/data/ds",
        OUTPUT_DIR=str(tmp_path / "out"),
        VENV=str(tmp_path / "venv"),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
        HF_HOME=str(tmp_path),
        PYTHONPATH=str(REPO),
    )
    return {"env": env, "log": log, "out": tmp_path / "out", "tmp": tmp_path}


def run_job(env: dict[str, str]) -> subprocess.CompletedProcess:
    """The batch script as sbatch runs it: bash, from the submission folder (the repository root)."""
    proc = start_job(env)
    try:
        out, err = finish(proc)
    finally:
        end_session(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def finish(proc: subprocess.Popen, timeout_s: float = RUN_TIMEOUT_S) -> tuple[str, str]:
    """The job's stdout and stderr once it ends; fails with both if it has not ended in time."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_session(proc)
        out, err = proc.communicate()
        pytest.fail(f"the job did not end within {timeout_s} s:\n{out[-3000:]}\n{err[-8000:]}")


def start_job(env: dict[str, str]) -> subprocess.Popen:
    """The batch script in a session of its own, so that everything it started can be ended with it."""
    return subprocess.Popen(
        ["bash", str(SBATCH)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def end_session(proc: subprocess.Popen) -> None:
    """Kill what is left of the job: its session and every descendant (torchrun starts its workers in sessions of
    their own)."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader while any member is left
    except (psutil.NoSuchProcess, ProcessLookupError):
        descendants = []
    for child in descendants:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def wait_for(condition, what: str, proc: subprocess.Popen):
    return processes.wait_for(condition, what, proc, RUN_TIMEOUT_S, stop=end_session)


def srun_calls(log: Path) -> list[list[str]]:
    path = log / "srun.log"
    return [block.splitlines() for block in path.read_text().strip().split("\n\n")] if path.exists() else []


def python_calls(log: Path) -> dict[int, dict]:
    """node -> what the fake python recorded there."""
    return {int(p.stem.removeprefix("python.node")): json.loads(p.read_text()) for p in log.glob("python.node*.json")}


def checkpoint(out: Path, name: str, complete: bool = True) -> None:
    (out / name).mkdir(parents=True)
    if complete:
        (out / name / "trainer_state.json").write_text("{}")


def sbatch_directives(path: Path) -> list[str]:
    """The options sbatch reads: #SBATCH lines before the first command (it stops reading there), comments cut."""
    options = []
    for line in path.read_text().splitlines()[1:]:
        if line.startswith("#SBATCH"):
            options += line.removeprefix("#SBATCH").split("#")[0].split()
        elif line.strip() and not line.startswith("#"):
            break
    return options


# --- the allocation -----------------------------------------------------------------------------------------------


def test_sbatch_asks_for_requeue_a_warning_signal_and_one_task_per_node():
    options = sbatch_directives(SBATCH)
    assert {"--requeue", "--ntasks-per-node=1", "--open-mode=append"} <= set(options), options
    (signal_option,) = [o for o in options if o.startswith("--signal=")]
    assert signal_option.startswith("--signal=B:USR1@"), "the warning must go to the batch shell (B:), as USR1"
    default_stop_timeout = int(
        next(line for line in SBATCH.read_text().splitlines() if line.startswith("STOP_TIMEOUT="))
        .split(":-")[1]
        .rstrip("}")
    )
    assert int(signal_option.rsplit("@", 1)[1]) > default_stop_timeout, "the requeue must come before the end"
    assert any(o.startswith("--time=") for o in options) and any(o.startswith("--nodes=") for o in options)


# --- launch command lines (recording python) ---------------------------------------------------------------------


def test_one_torchrun_per_node_meeting_on_the_first_host(slurm):
    env = dict(slurm["env"], TRAIN_ARGS="--steps 10  --batch_size 2")
    job = run_job(env)
    assert job.returncode == 0, job.stderr
    assert srun_calls(slurm["log"]) == [
        [
            "--nodes=2",
            "--ntasks=2",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "--cpus-per-task=4",
            "--cpu-bind=none",
            "bash",
            "examples/slurm/train_node.sh",
            "--root",
            "/data/ds",
            "--output_dir",
            str(slurm["out"]),
            "--steps",
            "10",
            "--batch_size",
            "2",
        ]
    ]
    calls = python_calls(slurm["log"])
    assert sorted(calls) == [0, 1]
    for node, call in calls.items():
        assert call["argv"] == [
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={node}",
            "--nproc_per_node=2",
            f"--rdzv_id={JOB_ID}",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint=node-a:{20000 + int(JOB_ID) % 20000}",
            "examples/train_streaming.py",
            "--root",
            "/data/ds",
            "--output_dir",
            str(slurm["out"]),
            "--steps",
            "10",
            "--batch_size",
            "2",
        ]
        assert call["usr1_ignored"], "torchrun must ignore USR1 (its default action would end it)"
    assert (slurm["log"] / "scontrol.log").read_text() == "show hostnames node-a,node-b\n"  # no requeue
    assert "starting from step 0" in job.stdout


def test_settings_override_the_defaults(slurm):
    env = dict(slurm["env"], MASTER_PORT="31337", NPROC_PER_NODE="3", SLURM_JOB_NODELIST="gpu7")
    job = run_job(env)
    assert job.returncode == 0, job.stderr
    (call,) = python_calls(slurm["log"]).values()
    assert {"--nnodes=1", "--nproc_per_node=3", "--rdzv_endpoint=gpu7:31337"} <= set(call["argv"])


@pytest.mark.parametrize(
    "layout, resume_from",
    [
        ([], None),
        ([(".tmp-checkpoint-5", True)], None),  # a save that never committed
        ([("checkpoint-5", False)], None),  # no trainer_state.json: not complete
        ([("checkpoint-x", True)], None),
        ([("checkpoint-5", True)], "checkpoint-5"),
        ([("checkpoint-9", True), ("checkpoint-12", True), ("checkpoint-40", False)], "checkpoint-12"),
        ([("checkpoint-09", True)], "checkpoint-09"),  # decimal, as train_streaming.py reads it: not octal
        ([("checkpoint-9", True), ("checkpoint-010", True)], "checkpoint-010"),
    ],
)
def test_resume_only_when_a_complete_checkpoint_exists(slurm, layout, resume_from):
    for name, complete in layout:
        checkpoint(slurm["out"], name, complete)
    job = run_job(slurm["env"])
    assert job.returncode == 0, job.stderr
    for call in python_calls(slurm["log"]).values():
        assert ("--resume" in call["argv"]) == (resume_from is not None), call["argv"]
    expected = f"resuming from {slurm['out'] / resume_from}" if resume_from else "starting from step 0"
    assert expected in job.stdout, job.stdout


@pytest.mark.parametrize(
    "unset, message",
    [
        ("ROOT", "set ROOT to the dataset folder or URL"),
        ("SLURM_JOB_ID", "not in a SLURM job: submit this script with sbatch"),
    ],
)
def test_missing_settings_fail_clearly(slurm, unset, message):
    env = dict(slurm["env"])
    del env[unset]
    job = run_job(env)
    assert job.returncode != 0 and message in job.stderr, job.stderr
    assert not srun_calls(slurm["log"])


def test_a_missing_venv_fails_clearly(slurm):
    job = run_job(dict(slurm["env"], VENV=str(slurm["tmp"] / "nowhere")))
    assert job.returncode == 2 and "set VENV to the virtual environment" in job.stderr, job.stderr


def test_node_script_passes_usr1_to_workers_in_their_own_sessions(slurm):
    """Where SLURM signals only each task's leader (or its process group), train_node.sh must still reach the
    workers, which torchrun starts in sessions of their own; torchrun itself ignores USR1."""
    env = dict(
        slurm["env"],
        FAKE_MODE="worker",
        PYTHON=str(slurm["tmp"] / "venv" / "bin" / "python"),
        NNODES="1",
        NPROC_PER_NODE="1",
        RDZV_ENDPOINT="node-a:1234",
        SLURM_NODEID="0",
    )
    proc = subprocess.Popen(
        ["bash", str(NODE_SCRIPT), "--root", "/data/ds"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: (slurm["log"] / "worker.ready").exists(), "the worker was ready", proc)
        os.kill(proc.pid, signal.SIGUSR1)  # the node script alone
        _, err = proc.communicate(timeout=60)  # a lost signal would leave the worker waiting
    except subprocess.TimeoutExpired:
        pytest.fail("the worker never got USR1")
    finally:
        end_session(proc)
    assert proc.returncode == 0, err
    assert (slurm["log"] / "worker.got-usr1").exists()
    assert python_calls(slurm["log"])[0]["usr1_ignored"]


def test_a_stop_that_hangs_is_requeued_after_stop_timeout(slurm):
    """Training that does not stop after the warning: the job is requeued anyway, before the time limit."""
    proc = start_job(dict(slurm["env"], FAKE_MODE="stuck", STOP_TIMEOUT="1"))
    try:
        wait_for(lambda: len(python_calls(slurm["log"])) == 2, "both nodes started", proc)
        os.kill(proc.pid, signal.SIGUSR1)
        requeue_log = slurm["log"] / "requeue.log"
        wait_for(lambda: requeue_log.exists() and requeue_log.read_text().endswith("\n"), "the requeue", proc)
        still_waiting = proc.poll() is None  # for srun: SLURM ends the job on the requeue, the fake does not
    finally:
        end_session(proc)
    _, err = proc.communicate()
    assert still_waiting
    assert requeue_log.read_text() == f"requeue {JOB_ID}: \n"
    assert "training did not stop within 1 s: requeueing now" in err, err


def test_a_failing_node_fails_the_job_without_a_requeue(slurm):
    job = run_job(dict(slurm["env"], FAKE_MODE="node1-fails"))
    assert job.returncode == 3, job.stderr
    assert "training exited with status 3" in job.stdout
    assert not (slurm["log"] / "requeue.log").exists()


# --- the real example: warning -> checkpoint -> requeue -> resume -------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_warning_checkpoints_requeues_and_the_restart_resumes(slurm, av1_root):
    pytest.importorskip("accelerate", reason="the training example needs `accelerate`")
    venv = Path(sys.executable).parents[1]  # the environment running the tests has robostream and torch
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"the tests do not run in a virtual environment ({sys.executable}): no VENV for the job")
    tmp, out = slurm["tmp"], slurm["out"]
    common = "--batch_size 4 --num_workers 1 --save_every 100000 --log_every 8 --seed 1 --pool_size 2"
    base = dict(
        slurm["env"],
        VENV=str(venv),
        ROOT=str(av1_root),
        SLURM_JOB_NODELIST="localhost,localhost",
        NPROC_PER_NODE="1",
        MASTER_PORT=str(free_port()),
        ACCELERATE_USE_CPU="true",
    )  # without a GPU, Accelerate joins torchrun's ranks only when told to
    first = tmp / "first.jsonl"
    proc = start_job(dict(base, TRAIN_ARGS=f"{common} --steps 100000 --record_samples {first}"))
    try:
        # Both ranks are training (their signal handlers installed) once each has recorded a step.
        wait_for(
            lambda: sorted(r for r, lines in read_records(first).items() if lines) == [0, 1],
            "both ranks recorded a step",
            proc,
        )
        os.kill(proc.pid, signal.SIGUSR1)  # what --signal=B:USR1@... does
        stdout, stderr = finish(proc)
    finally:
        end_session(proc)
    assert proc.returncode == 0, f"{stdout[-3000:]}\n{stderr[-3000:]}"
    records = read_records(first)
    assert all(r["world"] == 2 for lines in records.values() for r in lines), "not one job of 2 ranks over 2 nodes"
    last = {rank: lines[-1]["step"] for rank, lines in records.items()}
    assert last[0] == last[1], f"the ranks stopped after different steps: {last}"
    step = last[0]
    assert f"stopping after step {step} on SIGUSR1" in stdout, stdout[-3000:]
    # Requeued exactly once, after the checkpoint of the step reached was committed.
    assert (slurm["log"] / "requeue.log").read_text() == f"requeue {JOB_ID}: checkpoint-{step} \n"

    # The requeued job: same id, same settings (more steps would never end here, so 3 more).
    second = tmp / "second.jsonl"
    job = run_job(
        dict(base, SLURM_RESTART_COUNT="1", TRAIN_ARGS=f"{common} --steps {step + 3} --record_samples {second}")
    )
    assert job.returncode == 0, f"{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    assert (
        f"run 1: 2 node(s) x 1 process(es), rendezvous localhost:{base['MASTER_PORT']}, resuming from "
        f"{out / f'checkpoint-{step}'}" in job.stdout
    )
    assert f"resumed from {out / f'checkpoint-{step}'} at step {step}" in job.stdout, job.stdout[-3000:]
    resumed = read_records(second)
    assert {rank: [r["step"] for r in lines] for rank, lines in resumed.items()} == {
        rank: [step + 1, step + 2, step + 3] for rank in (0, 1)
    }
    assert (out / f"checkpoint-{step + 3}" / "trainer_state.json").is_file()
    assert (slurm["log"] / "requeue.log").read_text().count("requeue") == 1, "a finished run must not requeue"
