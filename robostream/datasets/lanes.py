"""batching="per_stream": every global batch from one source of a mixture.

Each source is planned apart as a "lane" (its own canonical streams, segments and quotas: everything a single
dataset has), and worker w of every rank follows one schedule of which lane each of its batches comes from
(plan/mixture.py: lane_schedule). Ranks take batch b from worker b % W in lockstep, so at every step all ranks read
the same source. A lane's last batch in a worker may be short; every other batch is whole.

Resume: the loader's batch count gives each worker role's progress through its schedule, hence the batches (and
samples) every lane delivered, hence each lane's segment positions, exactly as for one dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robostream.datasets.batch_assembly import Allocate
from robostream.datasets.epoch_iterator import EpochIterator, EpochPlan


@dataclass(frozen=True)
class LanePlan:
    """What every consumer role does in the coming pass under per_stream batching."""

    lanes: list[EpochPlan | None]  # per source; None: no samples this epoch
    batches: list[list[int]]  # per worker role: batches of each lane in this schedule generation
    done: list[int]  # per worker role: batches of its schedule delivered before this pass
    generation: int  # layouts this epoch went through before the current one
    rotation: int  # worker role shift after a same-layout resume
    schedules: list[np.ndarray]  # per worker role: the lane of each batch (lane_schedule of `batches`)


class LaneIterator:
    """One consumer role's batches (or their samples, in batch order), each from its schedule's lane."""

    def __init__(self, plan: LanePlan, iterators: Sequence[EpochIterator | None], worker_role: int,
                 batch_size: int) -> None:
        """
        Args:
            plan: the pass's lane plan.
            iterators: per lane this role's pass over it (None: the lane has no samples).
            worker_role: this role's worker index (its schedule).
            batch_size: samples per batch (the dataset's).
        """
        self.iterators = list(iterators)
        self.schedule = plan.schedules[worker_role][plan.done[worker_role]:]
        self.batch_size = batch_size
        self.batches_done = 0  # whole batches yielded (per-sample iteration: counted at each batch's last sample)
        self.in_batch = 0  # samples of the current batch yielded so far

    @property
    def emitted(self) -> int:
        return sum(it.emitted for it in self.iterators if it is not None)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        samples = {lane: iter(it) for lane, it in enumerate(self.iterators) if it is not None}
        for lane in self.schedule.tolist():
            self.in_batch = 0
            for sample in itertools.islice(samples[lane], self.batch_size):
                self.in_batch += 1
                yield sample
            self.batches_done += 1
            self.in_batch = 0

    def batches(self, batch_size: int, drop_last: bool, allocate: Allocate) -> Iterator[dict[str, Any]]:
        if batch_size != self.batch_size or drop_last:
            raise ValueError(f"batching='per_stream' was planned for batch_size={self.batch_size} without drop_last; "
                             f"the loader asks for {batch_size}{' with drop_last' if drop_last else ''}")
        batches = {lane: it.batches(batch_size, False, allocate) for lane, it in enumerate(self.iterators)
                   if it is not None}
        for lane in self.schedule.tolist():
            yield next(batches[lane])
            self.batches_done += 1
