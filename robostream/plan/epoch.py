"""An epoch's plan, its state after N batches, and a loaded state checked against it. Pure functions.

Arrays and lists in, plans and JSON-ready dicts out (MosaicML's `partition/` and `shuffle/` are the model); nothing
here reads a file or calls back into a dataset, so every layout, batching mode and resume can be tested by
arithmetic alone (tests/plan/test_epoch.py).

1. `stream_pieces`: the epoch's units (episodes, or a mixture's passes) permuted by (seed, epoch) and cut into C
   canonical streams, balanced ("contiguous") or by groups of episodes that share files ("files").
2. `plan_epoch`: who reads what (plan/segments.py) for a layout of ranks x workers, fresh or continuing a state:
   the same layout continues exactly (rotated to whose batch comes next), any other re-cuts what remains.
3. `epoch_state`: the state once every rank consumed `batches` batches (ranks consume in lockstep; the DataLoader
   takes batch b from worker b % W), so only the training loop's batch count is needed, never the workers'.
4. `plan_lanes` / `lanes_state`: batching="per_stream" or "stratified", every source planned apart as a "lane" (1-3
   per lane) and, per worker, one (batches x sources) matrix of how many samples of each lane each batch holds
   (plan/mixture.py: lane_batch_counts; per_stream's rows are one-hot). Everything after the matrix is shared.
5. `checked_epoch_resume` / `checked_lanes_resume`: a loaded state's numbers against this epoch's streams.

The trade-off of cutting into canonical streams rather than per consumer: the order is a function of (seed, epoch,
C) only, so any layout continues the same epoch; C fixed at the first start (a multiple of 12) makes common layouts
take over whole streams, others split a few segments (plan/segments.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from robostream.plan.mixture import EpochUnits, LaneBatchingMethod, lane_batch_counts
from robostream.plan.order import PURPOSE_POOL, epoch_episode_order, rng_for
from robostream.plan.partition import Piece, group_episodes_by_files, partition_episodes, split_contiguous
from robostream.plan.resume import emitted_by_role, rotation_after, round_robin_counts
from robostream.plan.schedule import pool_schedule, take
from robostream.plan.segments import (
    Segments,
    owned,
    positions_after,
    quotas_for_roles,
    read_order,
    recut,
    role_remaining,
    segments_from_state,
    segments_to_state,
    whole_streams,
)
from robostream.plan.state import check_epoch_state

Uneven = Literal["pad", "drop"]
Pick = tuple[int, int, int]  # (canonical stream, piece within the stream, position within the piece's samples)
Partition = Literal["contiguous", "files"]


@dataclass(frozen=True)
class EpochSpec:
    """Everything an epoch's streams depend on besides the layout: the units it reads and how to lay them out."""

    units: EpochUnits
    canonical: int  # canonical streams C
    seed: int
    epoch: int
    shuffle: bool
    uneven: Uneven
    partition: Partition = "contiguous"
    files: Sequence[Sequence[Hashable]] | None = None  # per unit, the files it reads (partition="files")

    def of_source(self, source: int) -> EpochSpec:
        """One source's units as an epoch of their own (a lane), with at most as many streams as samples."""
        keep = np.flatnonzero(self.units.source == source)
        units = self.units.of_source(source)
        files = None if self.files is None else [self.files[u] for u in keep.tolist()]
        return replace(self, units=units, canonical=min(self.canonical, int(units.length.sum())), files=files)


@dataclass(frozen=True)
class EpochPlan:
    """What every consumer role does in the coming pass; a pure function of the spec, layout and resume state."""

    units: EpochUnits  # the frame ranges (of episodes of sources) the epoch reads; pieces name them
    pieces: list[list[Piece]]  # per canonical stream
    natural: list[int]  # samples each stream holds
    segments: Segments  # who reads which range of which stream
    positions: np.ndarray  # per segment: where reading continues
    quotas: list[int]  # per consumer role: samples it still yields
    repeats_done: list[int]  # per consumer role: padding samples already yielded
    rotation: int  # worker role shift after a same-layout resume


@dataclass(frozen=True)
class LanePlan:
    """What every consumer role does in the coming pass when every source is planned apart as a lane
    (batching="per_stream" or "stratified"): the lanes and, per worker role, one matrix of the samples of each
    source in each of its batches. Only the matrix differs between the two (plan/mixture.py: lane_batch_counts)."""

    batching: LaneBatchingMethod
    lanes: list[EpochPlan | None]  # per source; None: no samples this epoch
    quotas: list[list[int]]  # per worker role: samples of each lane its allocation divides into batches
    done: list[int]  # per worker role: batches of its allocation delivered before this pass
    generation: int  # layouts this epoch went through before the current one
    rotation: int  # worker role shift after a same-layout resume
    counts: list[np.ndarray]  # per worker role: (batches, sources) samples of each source in each batch


def stream_pieces(spec: EpochSpec, lane: int = 0) -> list[list[Piece]]:
    """Pieces (unit, first, stop: frames relative to the unit) of every canonical stream.

    Args:
        spec: the epoch (its units, C, seed, epoch, shuffle, partition and, for "files", each unit's files).
        lane: which independent episode order to draw (a source's index when sources are planned apart).

    Returns:
        C lists of pieces. "contiguous" balances the streams' lengths and cuts at most C - 1 units in two;
        "files" keeps episodes that share a file in one stream (fewer files opened per stream, needs >= C groups).
    """
    units = spec.units
    order = epoch_episode_order(len(units), spec.seed, spec.epoch, spec.shuffle, lane)
    if spec.partition == "contiguous":
        return split_contiguous(order, units.length, spec.canonical)
    if spec.files is None or len(spec.files) != len(units):
        raise ValueError("partition='files' needs the files of every unit")
    groups = group_episodes_by_files(spec.files)
    if len(groups) < spec.canonical:
        raise ValueError(
            f"partition='files': episodes sharing files form {len(groups)} groups, fewer than the "
            f"{spec.canonical} canonical streams (files of different cameras roll over at different episodes); "
            f"use partition='contiguous' or fewer canonical streams"
        )
    order_rank = {int(p): i for i, p in enumerate(order)}  # a stream visits its groups in epoch order
    bins = partition_episodes([int(units.length[g].sum()) for g in groups], spec.canonical)
    return [
        [(p, 0, int(units.length[p])) for gi in sorted(b, key=lambda gi: order_rank[groups[gi][0]]) for p in groups[gi]]
        for b in bins
    ]


def stream_lengths(pieces: Sequence[Sequence[Piece]]) -> list[int]:
    """Samples each canonical stream holds."""
    return [sum(stop - first for _, first, stop in stream) for stream in pieces]


def plan_epoch(
    spec: EpochSpec, world_size: int, num_workers: int, resume: Mapping[str, Any] | None = None, lane: int = 0
) -> EpochPlan:
    """Segments, their positions and every consumer role's quota for the coming pass.

    Args:
        spec: the epoch.
        world_size, num_workers: the layout (consumer roles: rank * num_workers + worker).
        resume: a checked state to continue (`checked_epoch_resume`, or one lane of `checked_lanes_resume`
            with the state's layout and worker_rotation); None: a fresh epoch.
        lane: the lane's episode order (a source planned apart: per_stream, stratified).

    Returns:
        The plan. Quotas give worker w of every rank the same count (uneven="pad": the largest, the others repeat
        samples; "drop": the smallest), so every rank yields the same batches.
    """
    consumers = world_size * num_workers
    pieces = stream_pieces(spec, lane)
    natural = stream_lengths(pieces)
    if resume is None:
        segments = whole_streams(natural, consumers)
        positions = segments.lo.copy()
    else:
        layout = resume["layout"]
        segments, positions = segments_from_state(resume["segments"], natural, layout[0] * layout[1])
        if list(layout) == [world_size, num_workers]:
            # Same layout: every consumer continues exactly where it was, rotated to whose batch comes next.
            return EpochPlan(
                spec.units,
                pieces,
                natural,
                segments,
                positions,
                list(resume["quota_left"]),
                list(resume["repeats_done"]),
                int(resume["worker_rotation"]),
            )
        segments, positions = recut(segments, positions, consumers)  # another layout takes over what remains
    quotas = quotas_for_roles(role_remaining(segments, positions, consumers), world_size, num_workers, spec.uneven)
    return EpochPlan(spec.units, pieces, natural, segments, positions, quotas, [0] * consumers, 0)


def role_picks(plan: EpochPlan, role: int, *, seed: int, epoch: int, shuffle: bool, pool_size: int) -> Iterator[Pick]:
    """Every pick one consumer role yields in the pass, in order: its segments read by level fill (each along its
    stream's pool schedule, plan/schedule.py), then, under uneven="pad", its own samples again from the start
    until its quota is met.

    Args:
        plan: the pass's plan.
        role: the consumer role (rank * num_workers + worker role).
        seed, epoch, shuffle, pool_size: the dataset's (the pool schedule of stream s draws from (seed, epoch, s)).
    """
    rows = owned(plan.segments, role)
    if plan.quotas[role] and not len(rows):
        raise ValueError(
            f"consumer role {role} owns no samples of this epoch but must yield {plan.quotas[role]} "
            "(uneven='pad'): use uneven='drop' or fewer consumers"
        )

    def stream_picks(stream: int, start: int, stop: int) -> Iterator[Pick]:
        rng = rng_for(seed, epoch, PURPOSE_POOL, stream) if shuffle else None
        lengths = [last - first for _, first, last in plan.pieces[stream]]
        for pieces, positions in take(pool_schedule(lengths, pool_size, rng), start, stop - start):
            for piece, position in zip(pieces.tolist(), positions.tolist()):
                yield stream, piece, position

    def picks(positions: np.ndarray) -> Iterator[Pick]:
        his = plan.segments.hi[rows]
        streams = [
            stream_picks(int(plan.segments.stream[r]), int(p), int(h))
            for r, p, h in zip(rows.tolist(), positions.tolist(), his.tolist())
        ]
        for i in read_order(positions, his, interleaved=shuffle):
            yield next(streams[i])

    def repeats() -> Iterator[Pick]:
        while len(rows):
            yield from picks(plan.segments.lo[rows])

    padding = itertools.islice(repeats(), plan.repeats_done[role], None)
    return itertools.islice(itertools.chain(picks(plan.positions[rows]), padding), plan.quotas[role])


def advanced(plan: EpochPlan, emitted: Sequence[int], *, interleaved: bool) -> dict[str, Any]:
    """The segments, quotas and repeats of `plan` once every role r emitted emitted[r] samples of it.

    Args:
        plan: the pass's plan.
        emitted: samples each consumer role emitted (beyond what it owned: repeats).
        interleaved: roles read their segments by level fill (shuffled) or one after the other (chronological).
    """
    consumers = len(plan.quotas)
    positions = positions_after(plan.segments, plan.positions, consumers, emitted, interleaved=interleaved)
    left = role_remaining(plan.segments, plan.positions, consumers)
    repeats = [done + max(0, e - n) for done, e, n in zip(plan.repeats_done, emitted, left)]
    return {
        "segments": segments_to_state(plan.segments, positions),
        "quota_left": [int(q - e) for q, e in zip(plan.quotas, emitted)],
        "repeats_done": [int(r) for r in repeats],
    }


def epoch_state(
    plan: EpochPlan, world_size: int, num_workers: int, batches: int, batch_size: int, *, interleaved: bool
) -> dict[str, Any]:
    """The state of a pass once each rank consumed `batches` batches of `batch_size` (batching="random").

    Args:
        plan: the pass's plan (`plan_epoch` on this layout).
        world_size, num_workers: the layout.
        batches: batches each rank consumed in this pass.
        batch_size: samples per batch (a worker's last batch may be short).
        interleaved: see `advanced`.

    Returns:
        segments, quota_left, repeats_done and worker_rotation: what `checked_epoch_resume` reads back.
    """
    emitted = emitted_by_role(batches, plan.quotas, batch_size, world_size, num_workers, plan.rotation)
    remaining = [-(-plan.quotas[(j + plan.rotation) % num_workers] // batch_size) for j in range(num_workers)]
    return {
        **advanced(plan, emitted, interleaved=interleaved),
        "worker_rotation": rotation_after(remaining, batches, plan.rotation),
    }


def lane_plans(
    spec: EpochSpec, sources: int, world_size: int, num_workers: int, resume: Mapping[str, Any] | None
) -> list[EpochPlan | None]:
    """Every source planned apart as an epoch of its own (a lane; None: no samples this epoch), fresh or from the
    lanes of a checked state (per_stream or stratified)."""
    lanes: list[EpochPlan | None] = []
    for s in range(sources):
        lane_spec = spec.of_source(s)
        lane_state = (
            None
            if resume is None or resume["lanes"][s] is None
            else {"layout": resume["layout"], "worker_rotation": resume["worker_rotation"], **resume["lanes"][s]}
        )
        lanes.append(
            plan_epoch(lane_spec, world_size, num_workers, lane_state, lane=s) if lane_spec.canonical else None
        )
    return lanes


def plan_lanes(
    spec: EpochSpec,
    sources: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    resume: Mapping[str, Any] | None = None,
    *,
    batching: LaneBatchingMethod,
) -> LanePlan:
    """batching="per_stream" or "stratified": each source's plan (a lane) and, per worker role, how many samples of
    each source every one of its batches holds (plan/mixture.py: lane_batch_counts of the worker's lane quotas).

    Args:
        spec: the mixture's epoch (all sources' units).
        sources: the number of sources (lanes).
        world_size, num_workers: the layout.
        batch_size: samples per batch.
        resume: a checked state of the same batching (`checked_lanes_resume`); None: a fresh epoch.
        batching: which matrix divides a worker's lane quotas into batches.

    Returns:
        The plan. Worker w of every rank has the same lane quotas, hence the same matrix (per_stream: at every step
        all ranks read one source); the same layout continues its allocation, another allocates what remains anew
        (generation + 1).
    """
    lanes = lane_plans(spec, sources, world_size, num_workers, resume)
    if resume is not None and list(resume["layout"]) == [world_size, num_workers]:
        allocation = resume["allocation"]
        quotas, done, generation = allocation["quotas"], allocation["done"], int(allocation["generation"])
        rotation = int(resume["worker_rotation"])
    else:  # fresh epoch or new layout: each worker's lane quotas divided anew
        generation = 0 if resume is None else int(resume["allocation"]["generation"]) + 1
        quotas = [[lane.quotas[w] if lane is not None else 0 for lane in lanes] for w in range(num_workers)]
        done, rotation = [0] * num_workers, 0
    counts = [
        lane_batch_counts(
            batching,
            quotas[w],
            batch_size,
            seed=spec.seed,
            epoch=spec.epoch,
            worker=w,
            generation=generation,
            shuffle=spec.shuffle,
        )
        for w in range(num_workers)
    ]
    return LanePlan(
        batching, lanes, [list(map(int, q)) for q in quotas], list(map(int, done)), generation, rotation, counts
    )


def lanes_state(plan: LanePlan, num_workers: int, batches: int, *, interleaved: bool) -> dict[str, Any]:
    """The state once each rank consumed `batches` (whole) batches: each lane's positions and every worker role's
    place in its allocation.

    A DataLoader takes batches from its workers cyclically (worker j plays role (j + rotation) % W) and skips a
    worker that has run out, so the batch count gives each role's rows taken, and their sum the samples every lane
    delivered.

    Args:
        plan: the pass's lane plan on this layout.
        num_workers: workers per rank.
        batches: batches each rank consumed in this pass.
        interleaved: see `advanced`.
    """
    roles = [(j + plan.rotation) % num_workers for j in range(num_workers)]
    remaining = [len(plan.counts[r]) - plan.done[r] for r in roles]
    taken = dict(zip(roles, round_robin_counts(remaining, batches).tolist()))
    delivered = [plan.counts[w][plan.done[w] : plan.done[w] + taken[w]].sum(axis=0) for w in range(num_workers)]
    lanes: list[dict[str, Any] | None] = []
    for s, lane in enumerate(plan.lanes):
        if lane is None:
            lanes.append(None)
            continue
        emitted = [int(delivered[k % num_workers][s]) for k in range(len(lane.quotas))]
        lanes.append(advanced(lane, emitted, interleaved=interleaved))
    return {
        "batching": plan.batching,
        "lanes": lanes,
        "allocation": {
            "generation": plan.generation,
            "quotas": plan.quotas,
            "done": [d + taken[w] for w, d in enumerate(plan.done)],
        },
        "worker_rotation": rotation_after(remaining, batches, plan.rotation),
    }


def checked_epoch_resume(state: Mapping[str, Any], spec: EpochSpec) -> dict[str, Any]:
    """The resume part of a batching="random" state (`epoch_state` plus its layout), checked against the epoch's
    streams.

    Raises:
        ValueError: naming the row, role or key that does not describe what remains of this epoch.
    """
    resume = {k: state[k] for k in ("layout", "segments", "quota_left", "repeats_done", "worker_rotation")}
    natural = stream_lengths(stream_pieces(spec))
    check_epoch_state(
        resume["segments"], natural, state["layout"], resume["quota_left"], resume["repeats_done"], spec.uneven
    )
    return resume


def checked_lanes_resume(state: Mapping[str, Any], spec: EpochSpec, labels: Sequence[str]) -> dict[str, Any]:
    """The resume part of a batching="per_stream" or "stratified" state (`lanes_state` plus its layout), its
    allocation checked against the layout and every lane against its source's streams.

    Args:
        state: the state.
        spec: the mixture's epoch.
        labels: the sources' names, for errors.
    """
    lanes, allocation = state["lanes"], state["allocation"]
    if len(lanes) != len(labels):
        raise ValueError(f"resume state: {len(lanes)} lanes for {len(labels)} sources")
    if not len(allocation["quotas"]) == len(allocation["done"]) == state["layout"][1]:
        raise ValueError(f"resume state: allocation needs one entry per worker of the layout {state['layout']}")
    for w, (quotas, done) in enumerate(zip(allocation["quotas"], allocation["done"])):
        if not (
            isinstance(quotas, list)
            and len(quotas) == len(labels)
            and all(isinstance(q, int) and not isinstance(q, bool) and q >= 0 for q in [*quotas, done])
        ):
            raise ValueError(
                f"resume state: allocation of worker {w} must hold a count per source ({len(labels)}) and a "
                f"count of batches done (non-negative integers), got quotas {quotas!r} and done {done!r}"
            )
    for s, lane in enumerate(lanes):
        lane_spec = spec.of_source(s)
        if (lane is None) != (lane_spec.canonical == 0):
            raise ValueError(f"resume state: lane {s} does not match source {labels[s]}")
        if lane is None:
            continue
        if not isinstance(lane, Mapping) or not {"segments", "quota_left", "repeats_done"} <= set(lane):
            raise ValueError(f"resume state: lane {s} must hold segments, quota_left and repeats_done")
        natural = stream_lengths(stream_pieces(lane_spec, lane=s))
        check_epoch_state(
            lane["segments"],
            natural,
            state["layout"],
            lane["quota_left"],
            lane["repeats_done"],
            spec.uneven,
            where=f"resume state lane {s}",
        )
    return {k: state[k] for k in ("layout", "worker_rotation", "lanes", "allocation")}
