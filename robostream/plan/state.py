"""A resume state's numbers checked against each other, before any worker reads them.

A state is a few lists of integers that the user keeps in a checkpoint file. Nothing in their types says whether
they still describe one epoch: a quota of 1e15 would make an epoch that never ends, [0, 0] one that ends at once,
a removed segment row would skip its samples and an edited position repeat or skip some. Two checks close that:

- `check_epoch_state`: the invariants every state the dataset writes holds (segments inside their streams, none
  overlapping; each role's `quota_left` is what `quotas_for_roles` gives for what its segments still hold, because
  ranks consume in lockstep; repeats only after a role ran out of samples). Errors name the row or the role.
- `state_checksum` / `check_checksum`: a hash of the state's content, written into it and required when it is
  read back (a state without one is refused: deleting the key must not switch the check off); an edit anywhere
  (a position still inside its segment passes every invariant) no longer matches. A removed row is caught only
  here: samples of a stream that no segment covers are legitimate (a re-cut onto another layout drops what was
  consumed), so the numbers alone cannot tell a removed row from a consumed one. The training command's
  checkpoint file wraps the state with its step and epoch under a checksum of its own, by the same rule.

Pure: plain ints and lists in, ValueError out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from robostream.plan.segments import quotas_for_roles, role_remaining, segments_from_state

CHECKSUM = "checksum"


def state_checksum(state: Mapping[str, Any]) -> str:
    """A short hash of every entry of `state` but the checksum itself (JSON, keys sorted)."""
    body = {k: v for k, v in state.items() if k != CHECKSUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def check_checksum(state: Mapping[str, Any], *, where: str) -> None:
    """Raise ValueError, naming `where`, unless `state` holds the checksum of its own content."""
    if CHECKSUM not in state:
        raise ValueError(
            f"{where}: no {CHECKSUM!r} key; every state robostream writes has one, so this one was "
            "edited or not written by robostream: use the checkpoint's original state"
        )
    if state[CHECKSUM] != state_checksum(state):
        raise ValueError(
            f"{where}: checksum {state[CHECKSUM]!r} does not match its content; the state was edited "
            "or corrupted after it was saved: use the checkpoint's original state"
        )


def _ints(value: Any, length: int, name: str) -> list[int]:
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise ValueError(
            f"resume state: {name} must be a list of {length} non-negative integers (one per consumer "
            f"of the saved layout), got {value!r}"
        )
    return value


def check_epoch_state(
    rows: Sequence[Sequence[int]],
    natural: Sequence[int],
    layout: Sequence[int],
    quota_left: Any,
    repeats_done: Any,
    uneven: Literal["pad", "drop"],
    *,
    where: str = "resume state",
) -> None:
    """Raise ValueError, naming the row or role, unless a state's segments and quotas describe one epoch.

    Args:
        rows: the state's segment rows [stream, lo, hi, owner, position].
        natural: samples each canonical stream holds in this epoch.
        layout: [world_size, num_workers] the state was saved on.
        quota_left: samples each role still yields; repeats_done: samples each role repeated (uneven="pad").
        uneven: the dataset's setting; quotas are the largest ("pad") or smallest ("drop") remaining count of
            the roles with one worker index.
        where: names the state (or its lane) in errors.
    """
    world, workers = layout
    consumers = world * workers
    quota_left = _ints(quota_left, consumers, f"{where}: quota_left")
    repeats_done = _ints(repeats_done, consumers, f"{where}: repeats_done")
    segments, positions = segments_from_state(rows, natural, consumers)  # in range, no overlaps
    remaining = role_remaining(segments, positions, consumers)
    owed = quotas_for_roles(remaining, world, workers, uneven)
    for role, (left, due) in enumerate(zip(quota_left, owed)):
        if left != due:
            raise ValueError(
                f"{where}: quota_left[{role}] is {left}, but its segments leave worker {role % workers} "
                f"of every rank {due} samples to yield (uneven={uneven!r}); the state was edited, or "
                "saved with another uneven= setting"
            )
        if repeats_done[role] and remaining[role]:
            raise ValueError(
                f"{where}: repeats_done[{role}] is {repeats_done[role]} while role {role} still has "
                f"{remaining[role]} samples of its own; repeats only follow the last one"
            )


def _integer(state: Mapping[str, Any], key: str, minimum: int) -> int:
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"resume state: {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def check_state_head(state: Mapping[str, Any], *, lanes: bool) -> None:
    """Every key a state needs, with its type, so that a damaged state fails here, naming
    the key, not inside a DataLoader worker (lanes: batching="per_stream" or "stratified")."""
    _integer(state, "epoch", 0)
    _integer(state, "canonical_streams", 1)
    if isinstance(state.get("seed"), bool) or not isinstance(state.get("seed"), int):
        raise ValueError(f"resume state: 'seed' must be an integer, got {state.get('seed')!r}")
    if not isinstance(state.get("shuffle"), bool):
        raise ValueError(f"resume state: 'shuffle' must be true or false, got {state.get('shuffle')!r}")
    layout = state.get("layout")
    if (
        not isinstance(layout, list)
        or len(layout) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in layout)
    ):
        raise ValueError(
            f"resume state: 'layout' must be [world_size, num_workers] (positive integers), got {layout!r}"
        )
    rotation = _integer(state, "worker_rotation", 0)
    if rotation >= layout[1]:
        raise ValueError(f"resume state: 'worker_rotation' {rotation} is not a worker of the layout {layout}")
    needed = ("lanes", "allocation") if lanes else ("segments", "quota_left", "repeats_done")
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"resume state: missing {missing}; it is damaged or not a StreamingLeRobotDataset state")
    if lanes:
        allocation = state["allocation"]
        if (
            not isinstance(state["lanes"], list)
            or not isinstance(allocation, Mapping)
            or not all(
                isinstance(allocation.get(k), list) and len(allocation[k]) == layout[1] for k in ("quotas", "done")
            )
        ):
            raise ValueError(
                "resume state: 'lanes' must be a list and 'allocation' hold 'quotas' and 'done' per worker of the "
                f"layout {layout}"
            )
        _integer(allocation, "generation", 0)
    elif not isinstance(state["segments"], list):
        raise ValueError("resume state: 'segments' must be a list of rows [stream, lo, hi, owner, position]")
