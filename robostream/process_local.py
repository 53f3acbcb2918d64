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
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_FOREIGN: list = []  # values a forked child inherited: kept alive, unused, never freed in the child


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

    def get(self) -> T:
        if self._built is None or self._pid != self._getpid():
            if self._built is not None:
                # Built by the parent: freeing it here could join threads that only exist there (see above).
                _FOREIGN.append(self._built[0])
            self._built, self._pid = (self._factory(),), self._getpid()
        return self._built[0]

    def __getstate__(self) -> dict:
        return {"_factory": self._factory, "_built": None, "_pid": -1}


os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze)
