"""At interpreter exit, a loader's iterator left in a global runs its epoch's cleanup (giving back the decoders its
live pieces held) while modules are torn down: module globals such as `os` may already be None. Seen as an
"Exception ignored ... 'NoneType' object has no attribute 'getpid'" traceback after a script that kept `it =
iter(loader)` ended; which global goes first depends on the interpreter's teardown order, so the state is made here."""

from __future__ import annotations

import pytest

import robostream.process_local as process_local
from robostream.process_local import ProcessLocal


def test_a_process_local_value_is_reached_after_os_is_torn_down(monkeypatch: pytest.MonkeyPatch):
    value = ProcessLocal(list)
    built = value.get()
    monkeypatch.setattr(process_local, "os", None)  # what module teardown does to the module's globals
    assert value.get() is built
