"""How a streaming dataset's samples form batches, chosen once at construction: a strategy with plan, state, load
and iterate, so that no other code branches on the mode.

- `RandomBatching` (batching="random"): one plan over every unit of the epoch; samples of all sources shuffled
  together; any batch size, decided by the loader.
- `LaneBatching` (datasets/lanes.py) for batching="per_stream" (every global batch from one source of a mixture)
  and "stratified" (every batch holds each source's share of it): every source planned apart, and per worker one
  (batches x sources) matrix of the samples each batch takes from each; planned for one batch size, which the
  loader then uses.

The arithmetic is pure (plan/epoch.py); a strategy only picks which of it applies and builds the iterator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from robostream.datasets.epoch_iterator import EpochIterator
from robostream.datasets.lanes import LaneBatching, LaneIterator
from robostream.datasets.mixture_schema import FeatureMode, SchemaMode
from robostream.plan.epoch import (
    EpochPlan,
    EpochSpec,
    LanePlan,
    advanced,
    checked_epoch_resume,
    epoch_state,
    plan_epoch,
)
from robostream.plan.mixture import BatchingMethod

# One consumer role's pass over a plan (or a lane's, keeping that share of the live pieces)
PassFactory = Callable[..., EpochIterator]


class Batching(Protocol):
    """What the streaming dataset asks of its batching strategy."""

    # Read-only members (properties), so each strategy may pin them to narrower types.
    @property
    def name(self) -> BatchingMethod: ...

    @property
    def batch_size(self) -> int | None:  # the batch size it was planned for (None: the loader's)
        ...

    @property
    def lanes(self) -> bool:  # whether its states hold one lane per source
        ...

    def schema_mode(self, features: FeatureMode) -> SchemaMode: ...

    def plan(
        self, spec: EpochSpec, sources: int, world_size: int, num_workers: int, resume: Mapping[str, Any] | None
    ) -> EpochPlan | LanePlan: ...

    def checked(self, state: Mapping[str, Any], spec: EpochSpec, labels: Sequence[str]) -> dict[str, Any]: ...

    def state(
        self,
        plan: Any,
        world_size: int,
        num_workers: int,
        batches: int | None,
        batch_size: int,
        iterator: Any,
        *,
        interleaved: bool,
    ) -> dict[str, Any]: ...

    def iterator(self, plan: Any, worker_role: int, make_pass: PassFactory) -> EpochIterator | LaneIterator: ...

    def loader_batch_size(self, batch_size: int | None) -> int: ...

    def check_loader(self, *, drop_last: bool, assembled: bool) -> None: ...


class RandomBatching:
    """batching="random": the epoch planned whole; a batch mixes whatever the consumer's streams give."""

    name: BatchingMethod = "random"
    batch_size = None
    lanes = False

    def schema_mode(self, features: FeatureMode) -> SchemaMode:
        return features

    def plan(
        self, spec: EpochSpec, sources: int, world_size: int, num_workers: int, resume: Mapping[str, Any] | None
    ) -> EpochPlan:
        return plan_epoch(spec, world_size, num_workers, resume)

    def checked(self, state: Mapping[str, Any], spec: EpochSpec, labels: Sequence[str]) -> dict[str, Any]:
        return checked_epoch_resume(state, spec)

    def state(
        self,
        plan: EpochPlan,
        world_size: int,
        num_workers: int,
        batches: int | None,
        batch_size: int,
        iterator: EpochIterator | None,
        *,
        interleaved: bool,
    ) -> dict[str, Any]:
        if batches is not None:
            return epoch_state(plan, world_size, num_workers, batches, batch_size, interleaved=interleaved)
        # In-process iteration: ranks consume in lockstep, so this rank's own count stands for every role.
        emitted = [iterator.emitted if iterator is not None else 0] * (world_size * num_workers)
        return {**advanced(plan, emitted, interleaved=interleaved), "worker_rotation": plan.rotation % num_workers}

    def iterator(self, plan: EpochPlan, worker_role: int, make_pass: PassFactory) -> EpochIterator:
        return make_pass(plan)

    def loader_batch_size(self, batch_size: int | None) -> int:
        return 1 if batch_size is None else batch_size

    def check_loader(self, *, drop_last: bool, assembled: bool) -> None:
        """Any loader settings work: batches are cut from the consumer's sample sequence."""


def make_batching(batching: BatchingMethod, *, batch_size: int | None) -> Batching:
    """The strategy for a mixture's `batching` and `batch_size` (Mixture has checked that they go together)."""
    if batching == "random":
        return RandomBatching()
    assert batch_size is not None, "Mixture checks that per_stream and stratified have a batch_size"
    return LaneBatching(batching, batch_size=batch_size)
