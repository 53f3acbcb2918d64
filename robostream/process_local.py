"""Per-process state: values that must not cross a fork or a pickle (open files, thread pools, fsspec clients).

Also: no garbage crosses a fork. Objects of native libraries that own threads (PyAV's codec contexts: dav1d frame
threads; swscale slice threads) hang forever when freed in a forked child, which does not have those threads: the
free joins them. A dropped PyAV container sits in a reference cycle until the cyclic collector runs, and that may
be in a DataLoader worker forked in between (seen: a worker stuck in avcodec_free_context inside gc). So every
fork freezes the collector's view of the parent's objects (gc.freeze, what CPython documents for fork servers):
the child never collects them, and the parent unfreezes right after the fork.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_FOREIGN: list = []  # values a forked child inherited: kept alive, unused, never freed in the child
# Guards making a ProcessLocal's own lock (held for an assignment, never while a factory runs); made anew in a forked
# child, where a copy held by a thread of the parent would stay held.
_LOCKS = threading.Lock()


class ProcessLocal(Generic[T]):
    """A value built by `factory` in the process that first asks for it, and built anew in a forked child or after
    unpickling (spawned DataLoader workers), so no process ever uses a copy of another process's value; the
    inherited copy is kept alive in the child, never freed there.

    The factory must be picklable when the owner is (a class, a module-level function or a functools.partial).
    """

    # Kept on the class: at interpreter exit module globals (`os`) may already be None when a generator left in a
    # global runs its cleanup (an epoch's `finally` gives back the decoders it held), which asks for the value.
    _getpid = staticmethod(os.getpid)

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._built: tuple[T] | None = None  # (the value,) once built, in process _pid (a value may be None)
        self._pid = -1
        self._lock: tuple[int, threading.Lock] | None = None  # (process, the lock its first builders take)

    def get(self) -> T:
        built, pid, now = self._built, self._pid, self._getpid()
        if built is not None and pid == now:
            return built[0]
        # Built once per process even when its threads ask at once (two camera threads' first decodes each built a
        # decoder cache and one was lost; two GPU calls could each get a lock of their own).
        with self._process_lock(now):
            if self._built is None or self._pid != now:
                if self._built is not None:
                    # Built by the parent: freeing it here could join threads that only exist there (see above).
                    _FOREIGN.append(self._built[0])
                self._built, self._pid = (self._factory(),), now
            return self._built[0]

    def _process_lock(self, pid: int) -> threading.Lock:
        held = self._lock
        if held is None or held[0] != pid:
            with _LOCKS:
                held = self._lock
                if held is None or held[0] != pid:
                    held = self._lock = (pid, threading.Lock())
        return held[1]

    def __getstate__(self) -> dict:
        return {"_factory": self._factory, "_built": None, "_pid": -1, "_lock": None}


def _new_locks() -> None:
    global _LOCKS
    _LOCKS = threading.Lock()


os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze, after_in_child=_new_locks)
