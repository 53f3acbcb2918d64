"""Named crash points for the kill -9 tests: `ROBOSTREAM_CONVERT_KILL_AT=<point>` makes the process that reaches
`<point>` SIGKILL itself there (a real kill: no cleanup, no finally blocks, no flush), so a test can prove a rerun
recovers from an interruption at exactly that instant. Unset (always, outside tests), a crash point costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "ROBOSTREAM_CONVERT_KILL_AT"
POINTS = (
    "planned",  # probes done, plan.json not written yet
    "task-written",  # a task's output written and fsynced in its attempt folder, not yet published
    "task-published",  # output linked into staging, done marker not written yet
    "files-done",  # the parent, after the first file is done (its workers die with it)
    "metadata-written",  # finalize wrote the episodes table, not the rest of meta/
    "swap-half",  # the swap exchanged ROOT and staging (or renamed ROOT away), not finished
)


def crash_point(name: str) -> None:
    if os.environ.get(ENV_VAR) == name:
        os.kill(os.getpid(), signal.SIGKILL)
