"""batching="per_stream": every global batch from one source of a mixture (the strategy and its iterator).

Each source is planned apart as a "lane" (its own canonical streams, segments and quotas: everything a single
dataset has), and worker w of every rank follows one schedule of which lane each of its batches comes from
(plan/mixture.py: lane_schedule). Ranks take batch b from worker b % W in lockstep, so at every step all ranks read
the same source. A lane's last batch in a worker may be short; every other batch is whole.

Resume: the loader's batch count gives each worker role's progress through its schedule, hence the batches (and
samples) every lane delivered, hence each lane's segment positions, exactly as for one dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from robostream.datasets.batch_assembly import Allocate
from robostream.datasets.epoch_iterator import EpochIterator
from robostream.datasets.mixture_schema import FeatureMode, SchemaMode
from robostream.plan.epoch import EpochPlan, EpochSpec, LanePlan, checked_lanes_resume, lanes_state, plan_lanes


class LaneIterator:
    """One consumer role's batches (or their samples, in batch order), each from its schedule's lane."""

    def __init__(
        self, plan: LanePlan, iterators: Sequence[EpochIterator | None], worker_role: int, batch_size: int
    ) -> None:
        """
        Args:
            plan: the pass's lane plan.
            iterators: per lane this role's pass over it (None: the lane has no samples).
            worker_role: this role's worker index (its schedule).
            batch_size: samples per batch (the dataset's).
        """
        self.iterators = list(iterators)
        self.schedule = plan.schedules[worker_role][plan.done[worker_role] :]
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
        """Whole batches in schedule order (batch_size and drop_last were checked by PerStreamBatching)."""
        batches = {
            lane: it.batches(self.batch_size, False, allocate)
            for lane, it in enumerate(self.iterators)
            if it is not None
        }
        for lane in self.schedule.tolist():
            yield next(batches[lane])
            self.batches_done += 1


class PerStreamBatching:
    """batching="per_stream" (see datasets/batching.py): planned for one batch size, which the loader must use."""

    name: Literal["per_stream"] = "per_stream"
    lanes = True

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def schema_mode(self, features: FeatureMode) -> SchemaMode:
        """Batches never mix sources: each keeps its own keys, dtypes and shapes under the common names."""
        return "separate"

    def plan(
        self, spec: EpochSpec, sources: int, world_size: int, num_workers: int, resume: Mapping[str, Any] | None
    ) -> LanePlan:
        return plan_lanes(spec, sources, world_size, num_workers, self.batch_size, resume)

    def checked(self, state: Mapping[str, Any], spec: EpochSpec, labels: Sequence[str]) -> dict[str, Any]:
        return checked_lanes_resume(state, spec, labels)

    def state(
        self,
        plan: LanePlan,
        world_size: int,
        num_workers: int,
        batches: int | None,
        batch_size: int,
        iterator: LaneIterator | None,
        *,
        interleaved: bool,
    ) -> dict[str, Any]:
        if batches is None:  # in-process iteration: whole batches of this rank's own pass
            if iterator is not None and iterator.in_batch:
                raise ValueError(
                    f"batching='per_stream' resumes at batch boundaries; {iterator.in_batch} samples "
                    f"of a batch of {self.batch_size} were taken"
                )
            batches = iterator.batches_done if iterator is not None else 0
        elif batch_size != self.batch_size:
            raise ValueError(
                f"batching='per_stream' was planned for batch_size={self.batch_size}, the loader uses {batch_size}"
            )
        return lanes_state(plan, num_workers, batches, self.batch_size, interleaved=interleaved)

    def iterator(
        self, plan: LanePlan, worker_role: int, make_pass: Callable[[EpochPlan], EpochIterator]
    ) -> LaneIterator:
        return LaneIterator(
            plan, [make_pass(lane) if lane is not None else None for lane in plan.lanes], worker_role, self.batch_size
        )

    def loader_batch_size(self, batch_size: int | None) -> int:
        if batch_size is not None and batch_size != self.batch_size:
            raise ValueError(
                f"the dataset plans batching='per_stream' for batch_size={self.batch_size}: load it "
                f"with that batch_size (or leave the loader's unset), not {batch_size}"
            )
        return self.batch_size

    def check_loader(self, *, drop_last: bool, assembled: bool) -> None:
        if drop_last or not assembled:
            raise ValueError(
                "batching='per_stream' assembles every batch from one source in the dataset: load it "
                "without drop_last, collate_fn or image_transforms"
            )
