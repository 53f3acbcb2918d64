"""Running the real `lerobot` package in its own interpreter for the opt-in tests (compat, benchmark peer).

lerobot pins its own torch, so it lives in another environment, named by ROBOSTREAM_LEROBOT_PYTHON. Its processes
run offline (HF_HUB_OFFLINE=1) with a private HF_HOME, without robostream's Python paths. The reference scripts
(`run`) run one after another in one such interpreter kept for the session (ScriptRunner), which imports torch and
lerobot once: the parity tests went from ~15 interpreter starts to one (tests/compat: minutes -> about one).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import select
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

ENV_VAR = "ROBOSTREAM_LEROBOT_PYTHON"
SUBPROCESS_TIMEOUT_S = 300


def offline_env(hf_home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without robostream's Python paths and pytest's note of the running test (it changes
    with every test, and the interpreters kept for the session are kept per environment), offline, with a private HF
    cache."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        HF_HOME=str(hf_home),
        HF_LEROBOT_HOME=str(hf_home / "lerobot"),
        HF_DATASETS_CACHE=str(hf_home / "datasets"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONNOUSERSITE="1",
        **extra,
    )
    return env


@functools.cache
def skip_reason(hf_home: Path, modules: Sequence[str] = ("lerobot",)) -> str | None:
    """Why the lerobot tests cannot run here (None when they can)."""
    python = os.environ.get(ENV_VAR)
    if not python:
        return f"lerobot tests are opt-in: set {ENV_VAR} to a Python interpreter that has lerobot"
    statement = f"import {', '.join(modules)}"
    try:
        proc = subprocess.run(
            [python, "-c", statement], capture_output=True, text=True, timeout=120, env=offline_env(hf_home)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{ENV_VAR}={python!r} cannot be run: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"{ENV_VAR}={python!r} cannot `{statement}`: {tail}"
    return None


def run(python: str, hf_home: Path, args: Sequence[str], **env: str) -> str:
    """Run the script `args[0]` with `args[1:]` in `python`, offline, and return its stdout; a failure fails the
    test with the output's tail. Scripts run in a lerobot interpreter kept for the session (one per interpreter,
    HF_HOME and environment): importing torch and lerobot is most of a lerobot script's time (10-15 s on CI's cores,
    ~15 scripts a session). Anything else (`-c CODE`, `-m module`) runs in a fresh interpreter."""
    if not args[0].endswith(".py"):
        proc = subprocess.run(
            [python, *args],
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            env=offline_env(hf_home, **env),
        )
        if proc.returncode != 0:
            pytest.fail(
                f"{python} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout
    return _runner(python, hf_home, tuple(sorted(env.items()))).run(list(args))


@functools.cache
def _runner(python: str, hf_home: Path, env: tuple[tuple[str, str], ...]) -> ScriptRunner:
    return ScriptRunner(python, offline_env(hf_home, **dict(env)))


# The runner's loop, in the lerobot interpreter: a request per line on stdin (the script's argv), an answer per line
# on the results pipe (exit code and what the script printed); the script runs as `python script.py` would run it
# (its folder first on sys.path, as __main__), its stderr goes to the runner's log.
RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback
answers = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    sys.argv = json.loads(line)
    folder = os.path.dirname(os.path.abspath(sys.argv[0]))
    sys.path.insert(0, folder)
    printed, code = io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.path.remove(folder)
    sys.stderr.flush()
    answers.write(json.dumps({"code": code, "stdout": printed.getvalue()}) + "\n")
    answers.flush()
"""


class ScriptRunner:
    """One lerobot interpreter that runs scripts one after another (the session's tests run them in turn)."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.python = python
        self.log = tempfile.TemporaryFile()  # the scripts' stderr: the tail of a failed one is shown
        answers_read, answers_write = os.pipe()
        self.process = subprocess.Popen(
            [python, "-c", RUNNER, str(answers_write)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            text=True,
            env=env,
            pass_fds=(answers_write,),
        )
        os.close(answers_write)
        self.answers = os.fdopen(answers_read)
        atexit.register(self.process.kill)

    def run(self, args: list[str]) -> str:
        start = self.log.seek(0, os.SEEK_END)
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.answers], [], [], SUBPROCESS_TIMEOUT_S)
        line = self.answers.readline() if ready else ""
        self.log.seek(start)
        stderr = self.log.read().decode(errors="replace")
        if not line:  # the interpreter died (a crash is a failure, never a skip) or the script hung
            self.process.kill()
            _runner.cache_clear()
            pytest.fail(
                f"{self.python} {' '.join(args)}: no answer in {SUBPROCESS_TIMEOUT_S} s or the "
                f"interpreter died ({self.process.poll()}):\n{stderr[-3000:]}"
            )
        answer = json.loads(line)
        if answer["code"] != 0:
            pytest.fail(
                f"{self.python} {' '.join(args)} failed ({answer['code']}):\n{answer['stdout'][-3000:]}\n"
                f"{stderr[-3000:]}"
            )
        return answer["stdout"]
