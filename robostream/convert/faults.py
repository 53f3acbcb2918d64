"""Named crash points for the kill -9 tests.

`ROBOSTREAM_CONVERT_KILL_AT=<point>:<scope>` with `ROBOSTREAM_CONVERT_KILL_MARK=<file>`: the first process to
reach `<point>` creates `<file>` and SIGKILLs itself (scope `process`) or its whole process group (scope `run`: the
`robostream convert` command with all its workers, as `kill -9 -PGID` would). It is a real kill: no cleanup, no
finally blocks, no flush. The mark makes it fire once, so a replacement worker or a rerun passes the point. Unset
(always, outside tests), a crash point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "ROBOSTREAM_CONVERT_KILL_AT"
MARK_VAR = "ROBOSTREAM_CONVERT_KILL_MARK"
POINTS = (
    "planned",  # probes done, plan.json not written yet
    "task-written",  # a task's output written and fsynced in its attempt folder, not yet published
    "task-published",  # output linked into staging, done marker not written yet
    "task-done",  # a task's done marker written (the first file done; the others are not)
    "metadata-written",  # finalize wrote the episodes table, not the rest of meta/
    "swap-half",  # the swap exchanged ROOT and staging (or renamed ROOT away), not finished
)


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV_VAR)
    if spec is None or spec.split(":")[0] != name:
        return
    try:
        os.close(os.open(os.environ[MARK_VAR], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    if spec.endswith(":run"):
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
