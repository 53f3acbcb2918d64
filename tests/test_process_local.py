"""At interpreter exit, a loader's iterator left in a global runs its epoch's cleanup (giving back the decoders its
live pieces held) while modules are torn down: module globals such as `os` may already be None. Seen as an
"Exception ignored ... 'NoneType' object has no attribute 'getpid'" traceback after a script that kept `it =
iter(loader)` ended; which global goes first depends on the interpreter's teardown order, so the state is made here."""

from __future__ import annotations

import threading
import time

import pytest

import robostream.process_local as process_local
from robostream.process_local import ProcessLocal


def test_a_process_local_value_is_reached_after_os_is_torn_down(monkeypatch: pytest.MonkeyPatch):
    value = ProcessLocal(list)
    built = value.get()
    monkeypatch.setattr(process_local, "os", None)  # what module teardown does to the module's globals
    assert value.get() is built


def test_threads_asking_at_once_get_one_value_built_once():
    """The first `get` from several threads at once builds one value: each thread building its own (seen: two
    camera threads' first decodes each made a decoder cache, and one cache's open decoder and counts were lost) would
    also hand two threads two different locks."""
    threads, start = 8, threading.Barrier(8)
    built = []

    def factory() -> object:
        built.append(object())
        time.sleep(0.05)  # a slow build: every thread arrives while the first builds
        return built[-1]

    value = ProcessLocal(factory)
    got = []

    def ask() -> None:
        start.wait()
        got.append(value.get())

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(built) == 1 and len(got) == threads and all(g is built[0] for g in got)
