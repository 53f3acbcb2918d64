"""plan/epoch.py by arithmetic alone: a pass simulated from the pure plan, the way ranks, DataLoader workers and
both batching modes consume it, interrupted after any number of batches and continued on any other layout.

What a worker yields is `role_picks` (the code EpochIterator runs), cut into batches as EpochIterator.batches does
(or, per_stream and stratified, filled from the lanes as each row of the worker's matrix says, as LaneIterator does); what a rank consumes is torch's DataLoader order (worker j's batches in turn, an exhausted worker
skipped). A sample is (epoch unit, frame within the unit).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from robostream.plan.epoch import (
    EpochSpec,
    checked_epoch_resume,
    checked_lanes_resume,
    epoch_state,
    lanes_state,
    plan_epoch,
    plan_lanes,
    role_picks,
    stream_pieces,
)
from robostream.plan.mixture import epoch_units, stratified_counts
from robostream.plan.segments import owned, role_remaining

POOL = 3
SEED = 7


def _spec(lengths, counts, canonical, shuffle, uneven):
    units = epoch_units(lengths, counts, seed=SEED, epoch=0, sampling_method="balanced")
    return EpochSpec(units, canonical, SEED, 0, shuffle, uneven)


def _sample(plan, pick, units=None):
    """(unit, frame) of a pick; `units` maps a lane's units to the epoch's."""
    stream, piece, position = pick
    unit, first, _ = plan.pieces[stream][piece]
    return int(unit if units is None else units[unit]), int(first + position)


def _role_batches(plan, role, batch_size, shuffle, units=None):
    """A role's batches as lists of (sample, own): own is False for a padding repeat."""
    consumers = len(plan.quotas)
    if plan.quotas[role] and not len(owned(plan.segments, role)):
        assume(False)  # a documented refusal: more consumers than samples under uneven="pad"
    own = role_remaining(plan.segments, plan.positions, consumers)[role]
    picks = [
        (_sample(plan, p, units), i < own)
        for i, p in enumerate(role_picks(plan, role, seed=SEED, epoch=0, shuffle=shuffle, pool_size=POOL))
    ]
    return [picks[i : i + batch_size] for i in range(0, len(picks), batch_size)]


def _rank_order(per_worker):
    """torch's DataLoader order over its workers' batch lists: worker 0, 1, ..., skipping exhausted ones."""
    out, queues = [], [list(b) for b in per_worker]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _random_pass(plan, world, workers, batch_size, shuffle):
    """Per rank, its batches in consumption order."""
    return [
        _rank_order(
            [
                _role_batches(plan, r * workers + (j + plan.rotation) % workers, batch_size, shuffle)
                for j in range(workers)
            ]
        )
        for r in range(world)
    ]


def _lane_pass(plan, spec, world, workers, shuffle):
    """Per rank, its batches in consumption order, each a list of ((unit, frame), own) filled from its lanes as the
    worker's matrix row says (lanes in source order)."""
    units = [np.flatnonzero(spec.units.source == s) for s in range(len(plan.lanes))]
    ranks = []
    for r in range(world):
        per_worker = []
        for j in range(workers):
            w = (j + plan.rotation) % workers
            lanes = {
                s: iter(itertools.chain.from_iterable(_role_batches(lane, r * workers + w, 1, shuffle, units[s])))
                for s, lane in enumerate(plan.lanes)
                if lane is not None
            }
            per_worker.append(
                [
                    [sample for s in np.flatnonzero(row).tolist() for sample in itertools.islice(lanes[s], int(row[s]))]
                    for row in plan.counts[w][plan.done[w] :]
                ]
            )
            assert all(next(lane, None) is None for lane in lanes.values()), "a lane yields more than its rows take"
        ranks.append(_rank_order(per_worker))
    return ranks


layouts = st.tuples(st.integers(1, 3), st.integers(1, 3))
sources = st.lists(st.lists(st.integers(1, 15), min_size=1, max_size=5), min_size=1, max_size=3)


@st.composite
def epochs(draw):
    lengths = draw(sources)
    sizes = [sum(ls) for ls in lengths]
    counts = [draw(st.integers(1, 2 * n)) for n in sizes]  # partial passes, whole passes and repeats
    canonical = draw(st.integers(1, min(12, sum(counts))))  # at most one stream per sample (split_contiguous)
    return lengths, counts, canonical, draw(st.booleans()), draw(st.sampled_from(["pad", "drop"]))


def _json(state):
    return json.loads(json.dumps(state))


def _check_equal_steps(ranks):
    assert len({len(batches) for batches in ranks}) == 1, [len(b) for b in ranks]


def _delivered(ranks, steps):
    """(all samples, own samples) of the first `steps` batches of every rank."""
    batches = [b for rank in ranks for b in rank[:steps]]
    samples = [item for batch in batches for item in batch]
    return [s for s, _ in samples], [s for s, own in samples if own]


def _epoch_samples(spec):
    return [(u, f) for u in range(len(spec.units)) for f in range(int(spec.units.length[u]))]


@settings(max_examples=400, deadline=None)
@given(epoch=epochs(), first=layouts, second=layouts, third=layouts, batch_size=st.integers(1, 5), data=st.data())
def test_random_state_on_any_layout_continues_with_what_was_not_delivered(
    epoch, first, second, third, batch_size, data
):
    """Interrupted after any batch count on layout 1, continued on layout 2, interrupted again, finished on layout 3:
    every rank takes equal steps on every layout; under "pad" every sample of the epoch is delivered exactly once
    as its own (repeats are only padding), under "drop" at most once; the same layout continues exactly."""
    lengths, counts, canonical, shuffle, uneven = epoch
    spec = _spec(lengths, counts, canonical, shuffle, uneven)
    own, resume, layouts_run = [], None, [first, second, third]
    for hop, (world, workers) in enumerate(layouts_run):
        plan = plan_epoch(spec, world, workers, resume)
        ranks = _random_pass(plan, world, workers, batch_size, shuffle)
        _check_equal_steps(ranks)
        steps = len(ranks[0]) if hop == len(layouts_run) - 1 else data.draw(st.integers(0, len(ranks[0])))
        _, delivered = _delivered(ranks, steps)
        own += delivered
        state = {
            "layout": [world, workers],
            "version": 2,
            **epoch_state(plan, world, workers, steps, batch_size, interleaved=shuffle),
        }
        resume = checked_epoch_resume(_json(state), spec)
        if hop == 0:  # the same layout continues with exactly the batches an uninterrupted pass gives next
            again = _random_pass(plan_epoch(spec, world, workers, resume), world, workers, batch_size, shuffle)
            assert [rank[steps:] for rank in ranks] == again
    assert len(own) == len(set(own))
    if uneven == "pad":
        assert sorted(own) == _epoch_samples(spec)
    else:
        assert set(own) <= set(_epoch_samples(spec))


def _source(spec, batch):
    return {int(spec.units.source[u]) for (u, _), _ in batch}


@settings(max_examples=300, deadline=None)
@given(epoch=epochs(), first=layouts, second=layouts, batch_size=st.integers(1, 4), data=st.data())
def test_per_stream_state_on_any_layout_continues_with_what_was_not_delivered(epoch, first, second, batch_size, data):
    """batching="per_stream": every batch from one source (whole but the source's last in a worker) and, at every
    step, the same source on every rank; a state taken after any batch count and continued on any layout delivers
    every sample exactly once, and the same layout continues exactly."""
    lengths, counts, canonical, shuffle, _ = epoch
    spec = _spec(lengths, counts, canonical, shuffle, "pad")
    labels = [f"source {s}" for s in range(len(lengths))]
    own, resume = [], None
    for hop, (world, workers) in enumerate((first, second)):
        plan = plan_lanes(spec, len(lengths), world, workers, batch_size, resume, batching="per_stream")
        ranks = _lane_pass(plan, spec, world, workers, shuffle)
        _check_equal_steps(ranks)
        for step in zip(*ranks):
            assert len({frozenset(_source(spec, batch)) for batch in step}) == 1  # one source per global batch
        for rank in ranks:
            for batch in rank:
                assert batch and len(_source(spec, batch)) == 1
        steps = len(ranks[0]) if hop == 1 else data.draw(st.integers(0, len(ranks[0])))
        own += [s for rank in ranks for batch in rank[:steps] for s, mine in batch if mine]
        state = {"layout": [world, workers], **lanes_state(plan, workers, steps, interleaved=shuffle)}
        assert state["batching"] == "per_stream"
        resume = checked_lanes_resume(_json(state), spec, labels)
        if hop == 0:
            again = _lane_pass(
                plan_lanes(spec, len(lengths), world, workers, batch_size, resume, batching="per_stream"),
                spec,
                world,
                workers,
                shuffle,
            )
            assert [rank[steps:] for rank in ranks] == again
    assert sorted(own) == _epoch_samples(spec)


@settings(max_examples=300, deadline=None)
@given(epoch=epochs(), first=layouts, second=layouts, batch_size=st.integers(1, 6), data=st.data())
def test_stratified_state_on_any_layout_continues_with_what_was_not_delivered(epoch, first, second, batch_size, data):
    """batching="stratified": every batch of a worker holds each source's share of it (floor or ceil, but the
    last), ranks take equal steps, and a state taken after any batch count and continued on any layout delivers
    every sample exactly once."""
    lengths, counts, canonical, shuffle, _ = epoch
    spec = _spec(lengths, counts, canonical, shuffle, "pad")
    labels = [f"source {s}" for s in range(len(lengths))]
    own, resume = [], None
    for hop, (world, workers) in enumerate((first, second)):
        plan = plan_lanes(spec, len(lengths), world, workers, batch_size, resume, batching="stratified")
        for w in range(workers):
            shares = np.asarray(plan.quotas[w]) * batch_size / max(1, sum(plan.quotas[w]))
            full = plan.counts[w][:-1]
            assert (full.sum(axis=1) == batch_size).all() and (plan.counts[w].sum(axis=0) == plan.quotas[w]).all()
            assert (np.abs(full - shares) < 1 + 0.05).all()
        ranks = _lane_pass(plan, spec, world, workers, shuffle)
        _check_equal_steps(ranks)
        for rank in ranks:
            for batch in rank:
                assert batch, "an empty batch"
        steps = len(ranks[0]) if hop == 1 else data.draw(st.integers(0, len(ranks[0])))
        own += [s for rank in ranks for batch in rank[:steps] for s, mine in batch if mine]
        state = {"layout": [world, workers], **lanes_state(plan, workers, steps, interleaved=shuffle)}
        assert state["batching"] == "stratified"
        resume = checked_lanes_resume(_json(state), spec, labels)
        if hop == 0:
            again = _lane_pass(
                plan_lanes(spec, len(lengths), world, workers, batch_size, resume, batching="stratified"),
                spec,
                world,
                workers,
                shuffle,
            )
            assert [rank[steps:] for rank in ranks] == again
    assert sorted(own) == _epoch_samples(spec)


@settings(max_examples=100, deadline=None)
@given(
    epoch=epochs(), layout=layouts, batch_size=st.integers(1, 6), batching=st.sampled_from(["per_stream", "stratified"])
)
def test_per_stream_and_stratified_states_have_one_shape(epoch, layout, batch_size, batching):
    """One state shape for both lane batchings: only the `batching` field and the allocation's numbers differ."""
    lengths, counts, canonical, shuffle, _ = epoch
    spec = _spec(lengths, counts, canonical, shuffle, "pad")
    plan = plan_lanes(spec, len(lengths), *layout, batch_size, batching=batching)
    state = lanes_state(plan, layout[1], 1, interleaved=shuffle)
    assert set(state) == {"batching", "lanes", "allocation", "worker_rotation"}
    assert set(state["allocation"]) == {"generation", "quotas", "done"} and state["batching"] == batching
    for w, matrix in enumerate(plan.counts):
        assert matrix.shape[1] == len(lengths) and (matrix.sum(axis=0) == plan.quotas[w]).all()
        if batching == "per_stream":
            assert ((matrix > 0).sum(axis=1) == 1).all()  # one-hot rows


def test_stratified_counts_give_each_source_its_share_of_every_batch():
    counts = stratified_counts([60, 30, 30], 8)  # shares 4, 2, 2: exact in every batch
    assert (counts == [4, 2, 2]).all()
    counts = stratified_counts([50, 25, 10, 0], 16)  # shares 9.41, 4.71, 1.88, 0
    assert (counts.sum(axis=0) == [50, 25, 10, 0]).all() and (counts[:-1].sum(axis=1) == 16).all()
    assert set(counts[:-1, 0].tolist()) <= {9, 10} and set(counts[:-1, 2].tolist()) <= {1, 2}
    assert (
        np.abs(np.cumsum(counts, axis=0)[:-1] - np.outer(np.arange(1, len(counts)), [50, 25, 10, 0]) * 16 / 85).max()
        < 1.2
    )
    assert stratified_counts([0, 0], 4).shape == (0, 2)


def test_role_picks_follow_level_fill_then_repeat_own_samples():
    """One role's pick order: shuffled, its streams interleaved lowest position first (ties: table order);
    chronological, one after the other; every owned sample once, then (uneven="pad") its own samples again from
    the start."""
    spec = _spec([[4, 4, 4, 1]], [13], 4, True, "pad")
    plan = plan_epoch(spec, 1, 2)  # role 0 owns streams 0 and 2 of 3, 3, 3, 4 samples
    streams = [stream for stream, _, _ in role_picks(plan, 0, seed=SEED, epoch=0, shuffle=True, pool_size=POOL)]
    assert streams == [0, 2, 0, 2, 0, 2]
    plan = plan_epoch(_spec([[4, 4, 4, 1]], [13], 4, False, "pad"), 1, 2)
    streams = [stream for stream, _, _ in role_picks(plan, 0, seed=SEED, epoch=0, shuffle=False, pool_size=POOL)]
    assert streams == [0, 0, 0, 2, 2, 2]
    padded = plan_epoch(spec, 4, 1)  # four ranks of one worker: every quota is the largest stream's 4
    assert padded.quotas == [4, 4, 4, 4]
    seq = [_sample(padded, p) for p in role_picks(padded, 0, seed=SEED, epoch=0, shuffle=True, pool_size=POOL)]
    assert len(set(seq[:3])) == 3 and seq[3] == seq[0]  # three own samples, then the first again


def test_stream_pieces_cover_every_unit_once():
    spec = _spec([[5, 3, 8], [2, 6]], [16, 8], 5, True, "pad")
    covered = sorted((unit, f) for stream in stream_pieces(spec) for unit, a, b in stream for f in range(a, b))
    assert covered == _epoch_samples(spec)
    assert np.ptp([sum(b - a for _, a, b in s) for s in stream_pieces(spec)]) <= 1
