"""The conversion's work directory: the plan, one lease per running task, done markers, failures.

Every state change is a single atomic filesystem operation, so any number of processes on any number of machines
sharing the folder over a POSIX filesystem agree on it, and a process killed at any instant leaves it consistent:

```
plan.json                       written once (temp + fsync + rename) when planning ends
leases/<task>/<generation>.json  the task's leases; the highest generation is the current one. A lease is taken
                                 by creating the next generation with link(2), which fails if another process
                                 got there first, so two takers can never both win. The owner's heartbeat
                                 rewrites its own generation's expiry; a lease whose expiry passed, or whose
                                 owner is a dead process on this host, may be superseded by the next generation.
attempts/<task>/<attempt>/       where an attempt writes; nothing here is ever read as output
staging/                         the new dataset; an output enters it by link(2) after fsync (first one wins)
done/<task>.json                 size of the output in staging, written after it is there
failures/<task>/<attempt>.json   an attempt's error (time, owner, message)
```
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
import traceback
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from robostream.array_file import read_arrays, write_arrays
from robostream.durable import fsync_dir, fsync_file

TEMP_NAME = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{32}\.tmp(\.[a-z]+)?")  # what temp_sibling names


def temp_sibling(path: Path, suffix: str = "") -> Path:
    """Where an atomic write of `path` goes first: a hidden sibling of its own per writer."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp{suffix}")


def is_temp_of(name: str, target: str) -> bool:
    """Whether `name` is a `temp_sibling` of a file named `target` (left behind by a killed writer)."""
    match = TEMP_NAME.fullmatch(name)
    return match is not None and match["target"] == target


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write `doc` to `path` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(doc, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Named arrays to one array file (array_file.py), written like write_json_atomic."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, ".arrays")
    write_arrays(tmp, arrays)
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: Path) -> Any | None:
    """The document at `path`, or None if it does not exist."""
    try:
        with path.open("r", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Owner:
    """A process that can hold leases: host, pid and the process start time (pids get reused)."""

    host: str
    pid: int
    started: float

    @classmethod
    def current(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time())

    def is_dead_here(self) -> bool:
        """True only when the owner ran on this host and is gone; other hosts' owners are judged by expiry."""
        if self.host != socket.gethostname():
            return False
        try:
            return abs(psutil.Process(self.pid).create_time() - self.started) > 0.01
        except psutil.NoSuchProcess:
            return True

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


@dataclass(frozen=True)
class Lease:
    task_id: str
    generation: int
    attempt: str
    owner: Owner
    expires: float  # wall-clock seconds; hosts sharing a work dir need clocks closer than the lease duration


class WorkDir:
    """Leases, done markers and failures of one conversion's tasks (see the module docstring)."""

    def __init__(self, path: str | Path, *, lease_s: float = 60.0) -> None:
        self.path = Path(path)
        self.lease_s = lease_s
        self.plan_path = self.path / "plan.json"
        self.stats_path = self.path / "episode_stats.arrays"
        self.staging = self.path / "staging"

    # -- per-episode stats, parsed once at planning (JSON parsing is most of finalize at 100k episodes) -----------
    def save_episode_stats(self, stats: dict[str, dict[str, np.ndarray]]) -> None:
        save_arrays(
            self.stats_path,
            {f"{feature}\x1f{stat}": array for feature, stats_of in stats.items() for stat, array in stats_of.items()},
        )

    def load_episode_stats(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        for key, array in read_arrays(self.stats_path).items():
            feature, stat = key.split("\x1f")
            out.setdefault(feature, {})[stat] = array
        return out

    # -- layout ----------------------------------------------------------------------------------------------
    def _leases(self, task_id: str) -> Path:
        return self.path / "leases" / task_id

    def _done(self, task_id: str) -> Path:
        return self.path / "done" / f"{task_id}.json"

    def attempt_dir(self, lease: Lease) -> Path:
        return self.path / "attempts" / lease.task_id / lease.attempt

    # -- leases ----------------------------------------------------------------------------------------------
    def current_lease(self, task_id: str) -> Lease | None:
        folder = self._leases(task_id)
        try:
            generations = sorted(int(p.stem) for p in folder.glob("*.json"))
        except ValueError:
            generations = []
        if not generations:
            return None
        doc = read_json(folder / f"{generations[-1]:08d}.json")
        if doc is None:  # superseded and cleaned up between the listing and the read: look again
            return self.current_lease(task_id)
        return Lease(task_id, doc["generation"], doc["attempt"], Owner(**doc["owner"]), doc["expires"])

    def _lease_is_live(self, lease: Lease) -> bool:
        return lease.expires > time.time() and not lease.owner.is_dead_here()

    def try_claim(self, task_id: str, owner: Owner) -> Lease | None:
        """Take the task's lease if nobody holds a live one; None if another process holds it or just won it."""
        current = self.current_lease(task_id)
        if current is not None and self._lease_is_live(current):
            return None
        generation = 1 if current is None else current.generation + 1
        lease = Lease(task_id, generation, uuid.uuid4().hex, owner, time.time() + self.lease_s)
        folder = self._leases(task_id)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{lease.attempt}.tmp"
        tmp.write_text(json.dumps(asdict(lease)))
        try:
            os.link(tmp, folder / f"{generation:08d}.json")  # fails if another process took this generation
        except FileExistsError:
            return None
        finally:
            tmp.unlink()
        return lease

    def renew(self, lease: Lease) -> Lease | None:
        """Push the lease's expiry forward; None if it has been superseded (the caller must stop)."""
        current = self.current_lease(lease.task_id)
        if current is None or current.generation != lease.generation:
            return None
        renewed = Lease(lease.task_id, lease.generation, lease.attempt, lease.owner, time.time() + self.lease_s)
        write_json_atomic(self._leases(lease.task_id) / f"{lease.generation:08d}.json", asdict(renewed))
        return renewed

    def holds(self, lease: Lease) -> bool:
        """Whether `lease` is still the task's current, unexpired lease."""
        current = self.current_lease(lease.task_id)
        return current is not None and current.generation == lease.generation and current.expires > time.time()

    def release(self, lease: Lease) -> None:
        """Give the lease up at once (after a failure), so the task can be retried without waiting for expiry."""
        if self.holds(lease):
            expired = Lease(lease.task_id, lease.generation, lease.attempt, lease.owner, 0.0)
            write_json_atomic(self._leases(lease.task_id) / f"{lease.generation:08d}.json", asdict(expired))

    def leases_held_by_pid(self, host: str, pid: int, task_ids: list[str]) -> list[Lease]:
        """Current leases of unfinished tasks taken by process `pid` on `host` (e.g. a worker that died)."""
        out = []
        for task_id in task_ids:
            lease = self.current_lease(task_id)
            if lease is not None and (lease.owner.host, lease.owner.pid) == (host, pid) and not self.is_done(task_id):
                out.append(lease)
        return out

    # -- done and failed -------------------------------------------------------------------------------------
    def is_done(self, task_id: str) -> bool:
        return self._done(task_id).is_file()

    def done_size(self, task_id: str) -> int | None:
        doc = read_json(self._done(task_id))
        return None if doc is None else int(doc["size"])

    def mark_done(self, lease: Lease, size: int) -> None:
        write_json_atomic(
            self._done(lease.task_id),
            {"size": size, "attempt": lease.attempt, "owner": str(lease.owner), "time": time.time()},
        )

    def unmark_done(self, task_id: str) -> None:
        self._done(task_id).unlink(missing_ok=True)

    def record_failure(self, task_id: str, attempt: str, owner: Owner | str, message: str) -> None:
        write_json_atomic(
            self.path / "failures" / task_id / f"{attempt}.json",
            {"time": time.time(), "owner": str(owner), "message": message},
        )

    def failures(self, task_id: str, *, since: float) -> list[dict[str, Any]]:
        """The task's recorded failures at or after `since`, oldest first."""
        found = [read_json(p) for p in (self.path / "failures" / task_id).glob("*.json")]
        return sorted((f for f in found if f is not None and f["time"] >= since), key=lambda f: f["time"])

    def clean_attempts(self, task_id: str, keep: str | None = None) -> None:
        """Remove what dead attempts of a task left behind."""
        folder = self.path / "attempts" / task_id
        if folder.is_dir():
            for attempt in folder.iterdir():
                if attempt.name != keep:
                    shutil.rmtree(attempt, ignore_errors=True)


def failure_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
