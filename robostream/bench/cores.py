"""Which cores the benchmark's own store and the loader under test run on.

On a machine with cores to spare (MIN_CORES_TO_PIN or more) the store (threads of the `robostream bench`
process) gets STORE_CORE_COUNT of its own and the probe process, with its DataLoader workers, the rest: the
store's CPU then never competes with the loader's, and samples/s and client CPU measure the loader alone. Local
runs get the same probe cores, so a local run and a remote run compare on equal cores. With fewer cores, or several
ranks on a node (each with its own store), nothing is pinned, unless asked for (`--store_cores own`: a 2-core
machine then runs the loader on one core and the store on the other, so a remote/local ratio measures the
loader's costs without the store's CPU); the result's info says which it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from robostream.bench.choices import StoreCores
from robostream.bench.probe import pin_process

MIN_CORES_TO_PIN = 4
STORE_CORE_COUNT = 1  # the store's CPU is a small share of a run (it only serves ranges)


@dataclass(frozen=True)
class CoreSplit:
    """The cores of the store and of the probe (None: not pinned), and why."""

    store: list[int] | None
    probe: list[int] | None
    why: str

    def info(self, *, with_store: bool) -> dict[str, Any]:
        """What a result's info records: the cores each side ran on (None: unpinned, or no store)."""
        return {"store_cores": self.store if with_store else None, "probe_cores": self.probe, "why": self.why}


def split_cores(*, available: Sequence[int], ranks_per_node: int, store_cores: StoreCores = "auto") -> CoreSplit:
    """The store's cores (the last STORE_CORE_COUNT of `available`) and the probe's (the others) where there are
    enough.

    Args:
        available: the cores this process may run on (os.sched_getaffinity(0)).
        ranks_per_node: benchmark processes sharing the node (each runs its own store).
        store_cores: "auto": a core of its own for the store from MIN_CORES_TO_PIN cores on; "own": wherever the
            probe keeps a core (2 or more); "shared": never.
    """
    cores = sorted(available)
    if ranks_per_node > 1:
        return CoreSplit(None, None, f"not pinned: {ranks_per_node} ranks share the node's {len(cores)} cores")
    if store_cores == "shared":
        return CoreSplit(None, None, f"not pinned (--store_cores shared): the store shares the {len(cores)} cores")
    least = STORE_CORE_COUNT + 1 if store_cores == "own" else MIN_CORES_TO_PIN
    if len(cores) < least:
        return CoreSplit(None, None, f"not pinned: {len(cores)} cores, fewer than {least} (the store shares them)")
    return CoreSplit(
        cores[-STORE_CORE_COUNT:],
        cores[:-STORE_CORE_COUNT],
        f"pinned: the store on {STORE_CORE_COUNT} core, the loader on the rest",
    )


@contextlib.contextmanager
def pinned_here(cores: list[int] | None) -> Iterator[None]:
    """Every thread of this process (the store's; the threads they start inherit it) on `cores` meanwhile, then
    back where they were (None: left as they are)."""
    if cores is None:
        yield
        return
    before = sorted(os.sched_getaffinity(0))
    pin_process(cores)
    try:
        yield
    finally:
        pin_process(before)
