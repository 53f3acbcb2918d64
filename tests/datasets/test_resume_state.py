"""Resume states are validated completely when loaded (issues 21 and 32): a foreign, edited or damaged state fails
in the main process naming the key, row or role; never an epoch that skips, repeats, never ends or ends at once.
The checksum is required: deleting it does not switch the check off."""

from __future__ import annotations

import json

import pytest

from robostream import Mixture, Source, StreamOptions
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.plan.state import state_checksum


def _dataset(root, **kwargs):
    return StreamingLeRobotDataset(root=root, seed=3, **kwargs)


def _resigned(state):
    """A state with the checksum of its (edited) content: what the numbers alone must refuse."""
    body = {k: v for k, v in state.items() if k != "checksum"}
    return {**body, "checksum": state_checksum(body)}


@pytest.mark.parametrize("uneven", ["pad", "drop"])
@pytest.mark.parametrize("world, workers", [(1, 1), (2, 3), (3, 2)])
def test_every_state_the_dataset_writes_validates(av1_root, uneven, world, workers):
    """The invariants hold for any layout, batch size and batch count (the property the checks rely on)."""
    writer = _dataset(av1_root, streams=StreamOptions(uneven=uneven), rank=0, world_size=world)
    reader = _dataset(av1_root, streams=StreamOptions(uneven=uneven), rank=0, world_size=world)
    for batch_size in (1, 4):
        total = -(-max(writer.epoch_plan(world, workers).quotas) // batch_size) * workers
        for batches in range(0, total + 1, max(1, total // 7)):
            state = json.loads(
                json.dumps(writer.state_dict(batches=batches, batch_size=batch_size, num_workers=workers))
            )
            reader.load_state_dict(state)


def test_a_state_saved_after_an_elastic_resume_loads(av1_root):
    """A re-cut drops the consumed parts of segments, so a state saved on the new layout covers only what remains
    (found by tests/plan/test_epoch.py: such a state used to be refused as 'belonging to no segment')."""
    first = _dataset(av1_root, rank=0, world_size=2)
    state = json.loads(json.dumps(first.state_dict(batches=5, batch_size=3, num_workers=2)))
    second = _dataset(av1_root, rank=0, world_size=1)
    second.load_state_dict(state)
    again = json.loads(json.dumps(second.state_dict(batches=4, batch_size=3, num_workers=3)))
    assert sum(hi - lo for _, lo, hi, _, _ in again["segments"]) < len(list(_dataset(av1_root)))
    third = _dataset(av1_root, rank=0, world_size=1)
    third.load_state_dict(again)


def test_a_state_of_another_selection_or_dataset_is_refused(av1_root, h264_root):
    state = _dataset(av1_root, episodes=[0, 1, 2, 3]).state_dict()
    for other in (_dataset(av1_root, episodes=[1, 2, 3, 4]), _dataset(h264_root)):  # 4 episodes each
        with pytest.raises(ValueError, match="made with another dataset or episode selection"):
            other.load_state_dict(state)
    moved = _dataset(av1_root, episodes=[3, 2, 1, 0])  # the same selection, however it is spelled
    moved.load_state_dict(state)


def test_a_state_without_fingerprint_is_refused(av1_root):
    """There is no older robostream to stay compatible with: a state without the fingerprint was edited."""
    state = _resigned({k: v for k, v in _dataset(av1_root).state_dict().items() if k != "dataset"})
    with pytest.raises(ValueError, match="another dataset or episode selection \\('dataset' fingerprint None"):
        _dataset(av1_root).load_state_dict(state)


def _after_some_batches(root):
    dataset = _dataset(root, rank=0, world_size=2)
    return dataset.state_dict(batches=3, batch_size=2, num_workers=2)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.update(quota_left=[10**15] * 4), r"quota_left\[0\] is 1000000000000000, but its segments leave"),
        (lambda s: s.update(quota_left=[0] * 4), r"quota_left\[0\] is 0, but its segments leave worker 0"),
        (lambda s: s.update(repeats_done=[5, 0, 0, 0]), r"repeats_done\[0\] is 5 while role 0 still has"),
        (lambda s: s.pop("layout"), r"'layout' must be \[world_size, num_workers\]"),
        (lambda s: s.pop("segments"), r"missing \['segments'\]"),
        (lambda s: s.update(epoch="1"), r"'epoch' must be an integer >= 0, got '1'"),
        (lambda s: s.update(worker_rotation=5), r"'worker_rotation' 5 is not a worker of the layout \[2, 2\]"),
        (lambda s: s.update(quota_left=[1.5, 0, 0, 0]), "quota_left must be a list of 4 non-negative integers"),
    ],
)
def test_edited_or_damaged_states_fail_naming_the_key_row_or_role(av1_root, edit, message):
    state = json.loads(json.dumps(_after_some_batches(av1_root)))
    edited = json.loads(json.dumps(state))
    edit(edited)
    fresh = _dataset(av1_root, rank=0, world_size=2)
    with pytest.raises(ValueError, match=f"checksum .* does not match its content|{message}"):
        fresh.load_state_dict(edited)  # a missing or mistyped key is named before the checksum is compared
    edit(resigned := json.loads(json.dumps(state)))
    with pytest.raises(ValueError, match=message):
        fresh.load_state_dict(_resigned(resigned))
    assert fresh.epoch == 0  # a refused state changes nothing
    fresh.load_state_dict(state)


def test_a_removed_row_is_caught_by_the_checksum(av1_root):
    """Samples no segment covers are legitimate after an elastic re-cut (consumed parts are dropped), so a removed
    row passes the numbers when another rank's quota hides it: the checksum refuses it."""
    state = json.loads(json.dumps(_after_some_batches(av1_root)))
    state["segments"] = state["segments"][1:]
    with pytest.raises(ValueError, match="checksum"):
        _dataset(av1_root, rank=0, world_size=2).load_state_dict(state)


def test_an_edited_position_is_caught(av1_root):
    """A position moved inside its segment breaks no bound: the checksum refuses it, and on one rank (where every
    role owes exactly what its segments hold) so do the numbers."""
    state = json.loads(json.dumps(_dataset(av1_root).state_dict(batches=3, batch_size=2, num_workers=2)))
    state["segments"][0][4] += 1
    with pytest.raises(ValueError, match="checksum"):
        _dataset(av1_root).load_state_dict(state)
    with pytest.raises(ValueError, match=r"quota_left\[\d\] is \d+, but its segments leave"):
        _dataset(av1_root).load_state_dict(_resigned(state))


def test_a_refused_state_leaves_the_dataset_as_it_was(av1_root):
    dataset = _dataset(av1_root)
    dataset.set_epoch(2)
    bad = _resigned(dict(_dataset(av1_root).state_dict(), epoch=5, quota_left=[7]))
    with pytest.raises(ValueError, match="quota_left"):
        dataset.load_state_dict(bad)
    assert dataset.epoch == 2 and len(list(dataset)) == len(list(_dataset(av1_root)))


@pytest.mark.parametrize("episodes", ["01", b"01", [True], [0, 1.0], 3])
def test_episodes_must_be_integers(av1_root, episodes):
    """episodes="01" used to read episodes 0 and 1, [True] episode 1."""
    with pytest.raises(TypeError, match="episode"):
        _dataset(av1_root, episodes=episodes)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seed": float("nan")}, "seed: expected an integer"),
        ({"seed": -1}, "seed: must be >= 0"),
        ({"streams": {"pool_size": 0}}, "pool_size: must be >= 1"),
        ({"streams": {"pool_size": float("nan")}}, "pool_size: expected an integer"),
        ({"streams": {"decode_ahead": -1}}, "decode_ahead: must be >= 1"),
        ({"streams": {"canonical_streams": 0}}, "canonical_streams: must be"),
        ({"streams": {"uneven": "even"}}, "uneven='even': expected 'pad'"),
        ({"streams": {"partition": "random"}}, "partition='random': expected 'contiguous' or 'files'"),
    ],
)
def test_streaming_arguments_are_checked_by_name(av1_root, kwargs, message):
    with pytest.raises(ValueError, match=message):
        if "streams" in kwargs:
            StreamOptions(**kwargs["streams"])  # the option group checks its fields when it is made
        else:
            StreamingLeRobotDataset(root=av1_root, **kwargs)


@pytest.mark.parametrize("epoch, message", [(-1, "epoch: must be >= 0"), (1.5, "epoch: expected an integer")])
def test_set_epoch_takes_a_non_negative_integer(av1_root, epoch, message):
    with pytest.raises(ValueError, match=message):
        _dataset(av1_root).set_epoch(epoch)


def _lanes(root, batching):
    """A mixture of two selections of one dataset (so the features match), on rank 0 of 2."""
    sources = [Source(root=root, episodes=[0, 1, 2]), Source(root=root, episodes=[3, 4, 5, 6])]
    planned = {} if batching == "random" else {"batch_size": 2}
    return StreamingLeRobotDataset(
        mixture=Mixture(sources=sources, batching=batching, **planned), seed=3, rank=0, world_size=2
    )


@pytest.mark.parametrize("batching", ["one dataset", "random", "per_stream", "stratified"])
def test_a_state_without_its_checksum_is_refused(av1_root, batching):
    """Deleting the checksum switched the check off (issue 32): a quota edited with it skipped samples silently (11
    and 3 on one dataset, 8 and 7 in stratified and per_stream lanes)."""

    def make():
        return _dataset(av1_root, rank=0, world_size=2) if batching == "one dataset" else _lanes(av1_root, batching)

    state = json.loads(json.dumps(make().state_dict(batches=3, batch_size=2, num_workers=2)))
    unsigned = {k: v for k, v in state.items() if k != "checksum"}
    fresh = make()
    with pytest.raises(ValueError, match="resume state: no 'checksum' key; every state robostream writes has one"):
        fresh.load_state_dict(unsigned)
    fresh.load_state_dict(state)


@pytest.mark.parametrize(
    "state, message",
    [
        (None, r"expected a state_dict\(\) \(a mapping\), got NoneType None"),
        ([1, 2], r"expected a state_dict\(\) \(a mapping\), got list \[1, 2\]"),
        (
            {"version": 2, "stream_offsets": [0]},
            "resume state version 2; this robostream reads version 3, .* start the epoch again",
        ),
    ],
)
def test_what_is_not_a_state_is_named(av1_root, state, message):
    """`"data": null` in a checkpoint used to give "resume state version None"; a state of an older version (2:
    per_stream's own shape) cannot continue its epoch, and the error says to start the epoch again."""
    with pytest.raises(ValueError, match=message):
        _dataset(av1_root).load_state_dict(state)
