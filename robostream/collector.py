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
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_paused = 0  # blocks in progress (threads may construct datasets at once)
_was_enabled = False  # the collector's state when the first of them began


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
    try:
        yield
    finally:
        with _LOCK:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()
