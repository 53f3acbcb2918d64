"""Running the real `lerobot` package in its own interpreter for the opt-in tests (compat, benchmark peer).

lerobot pins its own torch, so it lives in another environment, named by ROBOSTREAM_LEROBOT_PYTHON. Its subprocesses
run offline (HF_HUB_OFFLINE=1) with a private HF_HOME, without robostream's Python paths.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

ENV_VAR = "ROBOSTREAM_LEROBOT_PYTHON"
SUBPROCESS_TIMEOUT_S = 300


def offline_env(hf_home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without robostream's Python paths, offline, with a private HF cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
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
    """Run `python args...` offline and return its stdout; a failure fails the test with the output's tail."""
    proc = subprocess.run(
        [python, *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=offline_env(hf_home, **env)
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{python} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout
