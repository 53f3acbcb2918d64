"""Who reads what: ranks x DataLoader workers ("consumers") over canonical streams.

The epoch is planned over C canonical streams, independent of the physical layout; K = world_size x num_workers
consumers share them (plan/segments.py): consumer k owns streams k, k + K, ... when K divides C, and any other layout
re-cuts what remains (MosaicML's "canonical nodes" idea, made elastic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Auto canonical count: a multiple of the first layout and of 12, so the first layout and 1, 2, 3, 4, 6 and 12
# consumers take over whole streams (better mixing than a re-cut); every other layout re-cuts.
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


def auto_canonical_streams(consumers: int) -> int:
    return math.lcm(consumers, ELASTIC_BASE)
