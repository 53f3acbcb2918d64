"""The cyclic garbage collector paused while a block makes many objects that all stay alive.

A collection pass walks the generations it collects; a full one walks every tracked object of the process (with
torch imported, ~365,000: ~0.2 s here). Collections are triggered by allocations, so a block that makes hundreds of
thousands of objects it keeps (torchcodec's import, the metadata of hundreds of sources) runs passes that free
nothing, and a full one lands in every few such blocks. Paused for the block and restored after it: what it left as
garbage is collected by the next pass after it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_paused = 0  # blocks in progress (threads may construct datasets at once)
_was_enabled = False  # the collector's state when the first of them began
_forks = 0  # forks this process's line went through: a block begun before one is not this child's to end


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block; its state before the first of the blocks in progress is restored when
    the last one ends (a process that turned it off keeps it off)."""
    global _paused, _was_enabled
    with _LOCK:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
        began = _forks
    try:
        yield
    finally:
        with _LOCK:
            if began == _forks:
                _paused -= 1
                if _paused == 0 and _was_enabled:
                    gc.enable()


def _forked() -> None:
    """In a forked child: the threads whose blocks were in progress are not there to end them, so the collector's
    state is restored now, under a new lock (a copy held by one of those threads would stay held)."""
    global _LOCK, _paused, _forks
    _LOCK = threading.Lock()
    _forks += 1
    if _paused:
        _paused = 0
        if _was_enabled:
            gc.enable()


os.register_at_fork(after_in_child=_forked)
