"""batching="per_stream" and "stratified": every source of a mixture planned apart as a "lane", and per worker one
(batches x sources) matrix of how many samples of each lane each batch holds (the strategy and its iterator).

Each lane has its own canonical streams, segments and quotas: everything a single dataset has. Worker w of every
rank divides its lane quotas into batches with its batching's function (plan/mixture.py: lane_batch_counts), the
only place the two differ (MosaicML's batching methods each return one array, too):
- per_stream: one-hot rows, every batch from one source, in a random order of the worker's batches; ranks take
  batch b from worker b % W in lockstep, so at every step all ranks read the same source. A lane's last batch in a
  worker may be short; every other batch is whole. Sources may differ in keys and shapes.
- stratified (MosaicML's `batching_method="stratified"` is the model): floor or ceil of batch_size x the source's
  share in every batch, the epoch's per-source counts exact.
A batch is assembled from the picks of every lane its row draws from, in one allocation, as a random batch of a
mixture is.

Live pieces: under stratified each lane is read at its source's share of the batches, so it keeps that share of
pool_size live per stream (at least one): a consumer holds about as many live pieces as under batching="random" (a
full pool per lane decoded 31% more frames than it delivered and ran at 0.64-0.76x random on 4 sources; shared,
1.08 and about 1x). Under per_stream a batch is read from one lane alone, which keeps a full pool so that a batch
mixes as many episodes of its source as a random batch does. Either way memory and open decoders grow with the
sources (and the matrix with batches x sources); with hundreds of sources whose share of a batch is below one
sample, batching="random" keeps the mixture in expectation at a cost flat in sources.

Resume: the loader's batch count gives each worker role's place in its matrix, hence the samples every lane
delivered, hence each lane's segment positions, exactly as for one dataset; the same layout continues the
allocation, another allocates what remains anew.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from robostream.datasets.batch_assembly import Allocate
from robostream.datasets.epoch_iterator import EpochIterator
from robostream.datasets.mixture_schema import FeatureMode, SchemaMode
from robostream.plan.epoch import EpochSpec, LanePlan, checked_lanes_resume, lanes_state, plan_lanes
from robostream.plan.mixture import LaneBatchingMethod


class LaneIterator:
    """One consumer role's batches (or their samples, in batch order), each holding its matrix row's count of every
    lane."""

    def __init__(self, plan: LanePlan, iterators: Sequence[EpochIterator | None], worker_role: int) -> None:
        """
        Args:
            plan: the pass's lane plan.
            iterators: per lane this role's pass over it (None: the lane has no samples).
            worker_role: this role's worker index (its matrix).
        """
        self.iterators = list(iterators)
        self.counts = plan.counts[worker_role][plan.done[worker_role] :]
        self.batches_done = 0  # whole batches yielded (per-sample iteration: counted at each batch's last sample)
        self.in_batch = 0  # samples of the current batch yielded so far

    @property
    def emitted(self) -> int:
        return sum(it.emitted for it in self.iterators if it is not None)

    def _refs(self, row: np.ndarray) -> list[tuple[Any, int]]:
        """One batch's picks: the row's count of each lane, lanes in source order."""
        return [ref for lane in np.flatnonzero(row).tolist() for ref in self._lane(lane).take(int(row[lane]))]

    def _lane(self, lane: int) -> EpochIterator:
        """The pass of a lane the plan takes samples from (only a lane with no samples for this role has none)."""
        iterator = self.iterators[lane]
        if iterator is None:
            raise RuntimeError(f"lane plan: lane {lane} has samples in a batch but no pass for this role")
        return iterator

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for row in self.counts:
                self.in_batch = 0
                for lane in np.flatnonzero(row).tolist():
                    iterator = self._lane(lane)
                    for ref in iterator.take(int(row[lane])):
                        self.in_batch += 1
                        yield iterator.sample(ref)
                self.batches_done += 1
                self.in_batch = 0
        finally:
            self._release()

    def batches(self, batch_size: int, drop_last: bool, allocate: Allocate) -> Iterator[dict[str, Any]]:
        """Whole batches in matrix order (batch_size and drop_last were checked by LaneBatching)."""
        # Any pass assembles picks of every source (one decode call per camera file, one working-set count).
        assembler = next(it for it in self.iterators if it is not None)
        try:
            for row in self.counts:
                yield assembler.assemble(self._refs(row), allocate)
                self.batches_done += 1
        finally:
            self._release()

    def _release(self) -> None:
        for iterator in self.iterators:
            if iterator is not None:
                iterator.release()


class LaneBatching:
    """batching="per_stream" or "stratified" (see datasets/batching.py): planned for one batch size, which the
    loader must use."""

    def __init__(self, name: LaneBatchingMethod, *, batch_size: int) -> None:
        """
        Args:
            name: "per_stream" (every batch from one source) or "stratified" (every batch holds each source's share).
            batch_size: samples per batch, the loader's.
        """
        self.name: LaneBatchingMethod = name
        self.batch_size = batch_size
        self.lanes = True

    def schema_mode(self, features: FeatureMode) -> SchemaMode:
        # per_stream batches never mix sources: each keeps its own keys, dtypes and shapes under the common names.
        return "separate" if self.name == "per_stream" else features

    def plan(
        self, spec: EpochSpec, sources: int, world_size: int, num_workers: int, resume: Mapping[str, Any] | None
    ) -> LanePlan:
        return plan_lanes(spec, sources, world_size, num_workers, self.batch_size, resume, batching=self.name)

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
                    f"batching={self.name!r} resumes at batch boundaries; {iterator.in_batch} samples "
                    f"of a batch of {self.batch_size} were taken"
                )
            batches = iterator.batches_done if iterator is not None else 0
        elif batch_size != self.batch_size:
            raise ValueError(
                f"batching={self.name!r} was planned for batch_size={self.batch_size}, the loader uses {batch_size}"
            )
        return lanes_state(plan, num_workers, batches, interleaved=interleaved)

    def iterator(self, plan: LanePlan, worker_role: int, make_pass: Callable[..., EpochIterator]) -> LaneIterator:
        # The part of pool_size each lane keeps live (module docstring): stratified, its source's share of the
        # epoch (from the epoch's units: the same on every layout and after a resume); per_stream, all of it.
        sizes = [int(lane.units.length.sum()) if lane is not None else 0 for lane in plan.lanes]
        total = max(1, sum(sizes))
        shares = [size / total if self.name == "stratified" else 1.0 for size in sizes]
        return LaneIterator(
            plan,
            [make_pass(lane, share) if lane is not None else None for lane, share in zip(plan.lanes, shares)],
            worker_role,
        )

    def loader_batch_size(self, batch_size: int | None) -> int:
        if batch_size is not None and batch_size != self.batch_size:
            raise ValueError(
                f"the dataset plans batching={self.name!r} for batch_size={self.batch_size}: load it "
                f"with that batch_size (or leave the loader's unset), not {batch_size}"
            )
        return self.batch_size

    def check_loader(self, *, drop_last: bool, assembled: bool) -> None:
        if drop_last or not assembled:
            raise ValueError(
                f"batching={self.name!r} assembles every batch from its matrix row of sources in the dataset: "
                "load it without drop_last, collate_fn or image_transforms"
            )
