"""The benchmark's probe launcher with real processes: a probe that dies by a signal while its children hold its
stderr open is reported, and its children are killed with it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from robostream.bench.runner import run_echoing_stderr


def _live_group(pid: int) -> int | None:
    """The process group of a process that is running (None: gone, or a zombie)."""
    try:
        state, _, group = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:3]
    except FileNotFoundError:
        return None
    return None if state == "Z" else int(group)


def _group_members(group: int) -> list[int]:
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _live_group(int(pid)) == group]


@pytest.mark.timeout(60)  # the bug this guards against was a hang: the children sleep far longer than this
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")
def test_a_probe_killed_by_a_signal_is_reported_and_its_children_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = (
        "import os, signal, sys, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(3600)\n"  # a DataLoader worker stuck with the probe's stderr open
        "    os._exit(0)\n"
        "sys.stderr.write('probe started\\n'); sys.stderr.flush()\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    returncode, tail = run_echoing_stderr([sys.executable, "-c", script])
    assert returncode == -signal.SIGSEGV
    assert "probe started" in tail
    probe = int(pid_file.read_text())
    # the probe's process group was killed: its orphan is gone once the kernel has delivered the SIGKILL
    deadline = time.monotonic() + 10
    while (left := _group_members(probe)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
