"""Waiting on a started process in the example tests (training runs, SLURM batch scripts)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    condition: Callable[[], Any],
    what: str,
    proc: subprocess.Popen,
    timeout_s: float,
    stop: Callable[[subprocess.Popen], None] = subprocess.Popen.kill,
) -> Any:
    """Poll `condition()` until it returns something truthy; fail if `proc` ends first or time runs out (then
    `stop(proc)` ends it, e.g. with its whole session)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended (rc {proc.returncode}) before {what}:\n{out[-3000:]}\n{err[-3000:]}")
        time.sleep(0.05)  # polling interval, not a timing assumption
    stop(proc)
    out, err = proc.communicate()
    pytest.fail(f"timed out waiting for {what}:\n{out[-3000:]}\n{err[-3000:]}")
