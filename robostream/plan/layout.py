"""Who reads what: ranks x DataLoader workers ("consumers") over canonical streams.

The epoch is planned over C canonical streams, independent of the physical layout; K = world_size x num_workers
consumers each own the streams s with s % K == k and emit them round-robin. K must divide C, so a job can resume
on any layout whose consumer count divides C (MosaicML's "canonical nodes" idea).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

# Auto canonical count: a multiple of the first layout and of 12, so 1, 2, 3, 4, 6 and 12 consumers (and the
# first layout's divisors) can all take over the epoch later.
ELASTIC_BASE = 12


@dataclass(frozen=True)
class Consumer:
    rank: int
    world_size: int
    worker: int
    num_workers: int

    @property
    def count(self) -> int:
        return self.world_size * self.num_workers

    @property
    def index(self) -> int:
        return self.rank * self.num_workers + self.worker


def resolve_rank_world() -> tuple[int, int]:
    """(rank, world_size) from an initialised torch.distributed group, else RANK/WORLD_SIZE, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world


def auto_canonical_streams(consumers: int) -> int:
    return math.lcm(consumers, ELASTIC_BASE)


def owned_streams(consumer: int, consumers: int, canonical: int) -> list[int]:
    """Canonical streams of one consumer; refuses layouts that do not divide the canonical count."""
    if canonical % consumers:
        raise ValueError(
            f"{consumers} consumers (ranks x DataLoader workers) cannot share {canonical} canonical streams evenly; "
            f"use a layout whose consumer count divides {canonical}, or start a new epoch with "
            f"canonical_streams set to a multiple of {consumers}")
    return list(range(consumer, canonical, consumers))
