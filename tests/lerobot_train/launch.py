"""Starting `robostream train` as a process of its own: fresh (`python -m robostream.lerobot.train`, or torchrun's),
or preimported: forked from an interpreter kept for the session that has already imported the command's modules
(IMPORTED; multiprocessing's forkserver works the same way).

Importing torch and lerobot is ~15 s of every fresh launch (`python -X importtime -c "import
robostream.lerobot.train"` in lerobot's environment: lerobot.common.train_utils 9 s, torch 5 s), most of a tiny test
run; a preimported launch skips it. It is a process of its own, in a session of its own, that parses its flags,
builds its data, policy and optimizer and trains as a fresh one does, is killed for real (with its DataLoader
workers) and leaves only what it wrote to disk. What only a fresh interpreter shows (the command starts as
`python -m`; its results do not depend on the hash seed or on state left by imports) stays shown by the fresh
launches: the uninterrupted reference run (A) of the streaming ACT comparison (test_train_command.py's act_runs:
its killed and resumed runs are forked, so a result that moved with the hash seed or an import's state would differ
there), and the torchrun runs; the other comparisons fork all their runs (a fresh lerobot import is 15-30 s of CI's
cores each). The kept interpreter has also looked up the flags' help text (scripts/help_cache.py), which draccus
would otherwise rebuild in every fork's parse.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# The kept interpreter: imports the command once, then forks a child per request (a JSON line: argv, the script or
# the module, where its stdout, stderr and exit code go) and answers its pid. Its children are reaped by the kernel
# (SIGCHLD ignored, back to the default in each child): a child's exit code comes in its exit file, written last.
IMPORTED = r"""
import json, os, runpy, signal, sys, traceback
import robostream.lerobot.train  # torch, lerobot: what each fork would import
from robostream.lerobot.config import RobostreamTrainConfig
from tests.lerobot_train.scripts.help_cache import cache_help_text
cache_help_text(warm_for=RobostreamTrainConfig)  # each fork's parse finds the flags' help text looked up
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        continue
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    code = 1
    try:
        if request["script"]:
            sys.argv = [request["script"], *request["args"]]
            sys.path.insert(0, os.path.dirname(request["script"]))
            runpy.run_path(request["script"], run_name="__main__")
        else:
            sys.argv = ["robostream.lerobot.train", *request["args"]]
            runpy.run_module("robostream.lerobot.train", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open(request["exit"] + ".tmp", "w") as file:
            file.write(str(code))
        os.rename(request["exit"] + ".tmp", request["exit"])
        os._exit(code)
"""
# A preimported run that ended without writing its exit code (killed by a signal).
KILLED = -9


@dataclass
class Run:
    """A started run: its process id, where its stdout and stderr go, and how its end is known (its Popen, or the
    exit file a preimported run writes last)."""

    pid: int
    stdout: Path
    stderr: Path
    popen: subprocess.Popen | None = None
    exit_file: Path | None = None

    def poll(self) -> int | None:
        """The exit code once the run ended (KILLED for a preimported run killed by a signal), else None."""
        if self.popen is not None:
            return self.popen.poll()
        assert self.exit_file is not None
        if self.exit_file.exists():
            return int(self.exit_file.read_text())
        if psutil.pid_exists(self.pid):
            return None
        return int(self.exit_file.read_text()) if self.exit_file.exists() else KILLED

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.05)
        return code

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


@functools.cache
def logs_folder() -> Path:
    """Where the runs' stdout, stderr and exit files go (removed when the session ends)."""
    folder = Path(tempfile.mkdtemp(prefix="robostream-train-runs-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


RUN_NUMBERS = itertools.count()


def start_fresh(command: list[str], env: dict[str, str]) -> Run:
    """`command` in a fresh interpreter, in a session of its own."""
    stdout, stderr = log_files()
    with stdout.open("w") as out, stderr.open("w") as err:
        popen = subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True)
    return Run(pid=popen.pid, stdout=stdout, stderr=stderr, popen=popen)


def start_preimported(python: str, env: dict[str, str], args: list[str], script: Path | None) -> Run:
    """`robostream train args` (or `script args`) forked from the kept interpreter of (python, env)."""
    stdout, stderr = log_files()
    exit_file = stdout.with_suffix(".exit")
    request = {"args": args, "script": str(script) if script else None, "exit": str(exit_file)}
    request |= {"stdout": str(stdout), "stderr": str(stderr)}
    return Run(
        pid=imported(python, json.dumps(env, sort_keys=True)).fork(request),
        stdout=stdout,
        stderr=stderr,
        exit_file=exit_file,
    )


def log_files() -> tuple[Path, Path]:
    number = next(RUN_NUMBERS)
    return logs_folder() / f"{number}.stdout", logs_folder() / f"{number}.stderr"


class Imported:
    """The kept interpreter that has imported the command (IMPORTED)."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.log = logs_folder() / "imported.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [python, "-c", IMPORTED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env
            )
        atexit.register(self.process.kill)
        self.answer("ready")

    def fork(self, request: dict) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return int(self.answer("a pid"))

    def answer(self, what: str) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            raise RuntimeError(
                f"the preimported interpreter gave no {what} (exit {self.process.poll()}):\n"
                f"{self.log.read_text()[-3000:]}"
            )
        return line


@functools.cache
def imported(python: str, env_json: str) -> Imported:
    return Imported(python, json.loads(env_json))
