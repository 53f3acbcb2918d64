"""Leases between real processes: one winner per generation, takeover after expiry or owner death, late writers
ignored; the journaled swap without renameat2."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robostream.convert import finalize
from robostream.convert.jobs import ConversionJob
from robostream.convert.manifest import Lease, Owner, WorkDir
from robostream.convert.planning import make_plan
from robostream.convert.worker import run_leased_task
from robostream.format.v21 import read_layout
from tests.helpers import DATA_MB, VIDEO_MB


def _claim(args: tuple[str, int]) -> int | None:
    path, _ = args
    lease = WorkDir(path).try_claim("task", Owner.current())
    return None if lease is None else lease.generation


def test_processes_racing_for_a_lease_produce_exactly_one_winner(tmp_path: Path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_claim, [(str(tmp_path), i) for i in range(16)])
    assert sorted(r for r in results if r is not None) == [1]


def test_a_live_lease_blocks_an_expired_one_is_taken_over_and_its_holder_learns_it(tmp_path: Path):
    me = Owner.current()
    held = WorkDir(tmp_path, lease_s=60).try_claim("t", Owner("other-host", 1, 0.0))
    assert held is not None and WorkDir(tmp_path).try_claim("t", me) is None  # live: blocked
    stale = WorkDir(tmp_path, lease_s=-1).try_claim("u", Owner("other-host", 1, 0.0))  # expired at birth
    taken = WorkDir(tmp_path).try_claim("u", me)
    assert taken is not None and taken.generation == stale.generation + 1
    work = WorkDir(tmp_path)
    assert not work.holds(stale) and work.renew(stale) is None  # the late holder must stop
    assert work.holds(taken) and work.renew(taken) is not None


def test_a_lease_of_a_dead_local_process_is_free_at_once(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = Owner(Owner.current().host, child.pid, time.time() - 5)
    WorkDir(tmp_path, lease_s=3600).try_claim("t", dead)
    assert WorkDir(tmp_path).try_claim("t", Owner.current()).generation == 2


def test_a_late_writer_publishes_nothing(v21_root: Path, tmp_path: Path):
    _, plan, _ = make_plan(v21_root, data_limit_mb=DATA_MB, video_limit_mb=VIDEO_MB)
    task = plan.tasks[-1]
    late = WorkDir(tmp_path, lease_s=-1).try_claim(task.task_id, Owner("other-host", 7, 0.0))
    WorkDir(tmp_path).try_claim(task.task_id, Owner.current())  # took over the expired lease
    assert run_leased_task(WorkDir(tmp_path), late, task, ConversionJob(plan, read_layout(v21_root))) is None
    assert not (tmp_path / "staging" / task.output).exists() and not WorkDir(tmp_path).is_done(task.task_id)
    assert not [p for p in (tmp_path / "attempts").rglob("*") if p.is_file()]  # its attempt is cleaned up


def _dataset(path: Path, version: str) -> Path:
    (path / "meta").mkdir(parents=True)
    (path / "meta/info.json").write_text(f'{{"codebase_version": "{version}"}}')
    return path


@pytest.mark.parametrize("crash_after_first_rename", [False, True])
def test_swap_without_rename_exchange_keeps_a_dataset_reachable_and_completes(
    crash_after_first_rename: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(finalize, "exchange", lambda a, b: False)  # e.g. a filesystem without RENAME_EXCHANGE
    root, stage = _dataset(tmp_path / "ds", "v2.1"), _dataset(tmp_path / "work/staging", "v3.0")
    journal = tmp_path / "work/swap.json"
    if crash_after_first_rename:  # the state a crash between the two renames leaves
        finalize.write_json_atomic(journal, {"root": str(root)})
        root.rename(tmp_path / "ds_old")
    finalize.swap(journal, stage, root, out=None)
    assert "v3.0" in (root / "meta/info.json").read_text()
    assert "v2.1" in (tmp_path / "ds_old/meta/info.json").read_text()
    assert not stage.exists()


def test_swap_refuses_to_overwrite_an_existing_old_copy(tmp_path: Path):
    root, stage = _dataset(tmp_path / "ds", "v2.1"), _dataset(tmp_path / "work/staging", "v3.0")
    _dataset(tmp_path / "ds_old", "v2.0")
    with pytest.raises(finalize.RobostreamError, match="ds_old: exists"):
        finalize.swap(tmp_path / "work/swap.json", stage, root, out=None)
    assert "v2.1" in (root / "meta/info.json").read_text()


def test_lease_round_trips_through_its_file(tmp_path: Path):
    lease = WorkDir(tmp_path).try_claim("t", Owner.current())
    assert WorkDir(tmp_path).current_lease("t") == Lease("t", 1, lease.attempt, lease.owner, lease.expires)
