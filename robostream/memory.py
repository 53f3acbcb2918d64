"""Giving memory back to the OS after a large transient allocation.

Parsing a lerobot episodes-file footer allocates ~120 MiB of small objects per 10k episodes that are freed right
after; glibc keeps freed small blocks in its heap, so without a trim the process (and every DataLoader worker
forked from it, whose RSS counts the inherited pages) would carry them for its whole life.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import pyarrow as pa


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)  # glibc only; other C libraries return memory differently


def release_freed_memory() -> None:
    """Return freed heap memory (glibc) and unused Arrow pool memory to the OS."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
