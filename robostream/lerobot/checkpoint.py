"""Checkpoints in lerobot's layout, plus the data position, committed by one rename.

`<output_dir>/checkpoints/<step>/pretrained_model/` is lerobot's (policy config and weights, processors with their
stats, train_config.json: what `lerobot-eval --policy.path=...` and `from_pretrained` load) and `training_state/`
too (optimizer, scheduler, RNG, step), written by lerobot's own `save_checkpoint` (under FSDP from the full state
every rank gathered first, as lerobot-train writes it). robostream adds
`training_state/robostream_data.json`: the step, the epoch, the streaming loader's state and the episodes each source
holds out for the eval loss (`--dataset.eval_split`) under one checksum, so `--resume` continues with the batches an
uninterrupted run would have seen, on any number of processes, holding out the same episodes (and refuses a file
edited, pasted from another step, or saved in the other mode). lerobot writes straight into the step's
folder; here it is written into a scratch folder beside the checkpoints (`.tmp-<step>-<random>`, marked as
robostream's before anything is put in it) and flushed to disk, renamed into place (a step saved before, a folder
or a link, first moved into the scratch folder: a link is removed, never followed), then `last` is replaced by a
link to it in one rename: a kill (or a node's crash) at any point leaves `last` naming a complete checkpoint (when
`last` named the step saved again, it names the new checkpoint in the scratch folder until it is in place: a window
of one rename). Only marked scratch folders are ever deleted: anything else called `.tmp-*` beside the checkpoints
is left alone, with a warning.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot.common.train_utils import get_step_checkpoint_dir, load_training_state, save_checkpoint
from lerobot.utils.constants import LAST_CHECKPOINT_LINK, TRAINING_STATE_DIR

from robostream.durable import REPLACED, fsync_dir, fsync_tree, make_scratch, remove_scratch_left
from robostream.lerobot.eval_split import HeldOut
from robostream.plan.state import CHECKSUM, check_checksum, state_checksum

DATA_STATE = "robostream_data.json"
SCRATCH_PREFIX = ".tmp-"  # the folders a save makes beside the checkpoints (durable.make_scratch)
SCRATCH_MADE_BY = "robostream's checkpoint saves"


@dataclass
class Position:
    """Where training is: optimisation steps done and the epoch the data position belongs to."""

    step: int = 0
    epoch: int = 0


def save(
    *,
    cfg: Any,
    position: Position,
    data_state: dict[str, Any] | None,
    held_out: HeldOut | None,
    num_processes: int,
    **parts: Any,
) -> Path:
    """Write the checkpoint of `position.step` (main process only) and make it `last`.

    Args:
        cfg: the training config (saved as train_config.json).
        position: the step and epoch.
        data_state: the streaming loader's state_dict (None for map-style: lerobot's step arithmetic resumes it).
        held_out: the episodes each source holds out for the eval loss (None: no eval split).
        num_processes: the processes training (recorded, as lerobot does).
        parts: policy, optimizer, scheduler, preprocessor, postprocessor for lerobot's save_checkpoint, and under
            FSDP model_state_dict and optim_state_dict: the full state gathered from every rank (lerobot's
            gather_fsdp_state_dicts), written in place of the main process's shards.
    """
    final = get_step_checkpoint_dir(cfg.output_dir, cfg.steps, position.step)
    if final.is_file() and not final.is_symlink():
        raise FileExistsError(
            f"{final}: a file where the checkpoint of step {position.step} goes; robostream never "
            "deletes what it did not make: move the file away and resume from the last checkpoint"
        )
    checkpoints = final.parent
    checkpoints.mkdir(parents=True, exist_ok=True)
    last = checkpoints / LAST_CHECKPOINT_LINK
    named = last.resolve() if last.is_symlink() else None
    # all but the one holding the checkpoint `last` names
    remove_scratch_left(checkpoints, SCRATCH_PREFIX, made_by=SCRATCH_MADE_BY, keep=named)
    scratch = make_scratch(checkpoints, f"{SCRATCH_PREFIX}{final.name}-", made_by=SCRATCH_MADE_BY)
    new = scratch / "checkpoint"
    save_checkpoint(
        checkpoint_dir=new, step=position.step, cfg=cfg, num_processes=num_processes, batch_size=cfg.batch_size, **parts
    )
    (new / TRAINING_STATE_DIR / DATA_STATE).write_text(json.dumps(data_document(position, data_state, held_out)))
    fsync_tree(scratch)
    if os.path.lexists(final):  # a run resumed from an older checkpoint saves a step saved before: move it aside
        if named == final.resolve():  # `last` names it: it names the new one (complete) until that is in place
            _point_last(new, scratch)
        os.replace(final, scratch / REPLACED)  # a link moves as a link: what it names stays where it is
    os.replace(new, final)
    _point_last(final, scratch)
    shutil.rmtree(scratch)  # the replaced checkpoint, or link (unlinked, never followed), and the marker
    return final


def _point_last(checkpoint: Path, scratch: Path) -> None:
    """`last` -> `checkpoint` (relative, as lerobot links it) in one rename: never missing, never half-made. The
    new link is made in this save's scratch folder, so no other name is ever taken or overwritten."""
    checkpoints = scratch.parent
    link = scratch / LAST_CHECKPOINT_LINK
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(checkpoint, checkpoints))
    os.replace(link, checkpoints / LAST_CHECKPOINT_LINK)
    fsync_dir(checkpoints)


def data_document(position: Position, data_state: dict[str, Any] | None, held_out: HeldOut | None) -> dict[str, Any]:
    """robostream_data.json: the step and epoch with the loader's state (None: map-style) and the held-out episodes
    (None: no eval split) under one checksum, so that none of them is edited, nor the data of another step pasted
    in, unnoticed (plan/state.py's rule)."""
    document = {"step": position.step, "epoch": position.epoch, "data": data_state, "held_out": held_out}
    return {**document, CHECKSUM: state_checksum(document)}


def read_data_document(checkpoint: Path, *, streaming: bool) -> dict[str, Any]:
    """The checkpoint's robostream_data.json, checked whole before anything is built for the run (a damaged or
    edited file, or one saved in the other mode, is refused before the data and the policy are made).

    Args:
        checkpoint: the checkpoint folder resumed from.
        streaming: whether this run streams (a streaming run saves the loader's state, a map-style run none).

    Raises:
        ValueError: the data file is damaged or edited, or was written by the other mode.
    """
    document = _read_data_document(checkpoint / TRAINING_STATE_DIR / DATA_STATE, checkpoint)
    _check_mode(document, streaming, checkpoint)
    return document


def load(
    checkpoint: Path, document: dict[str, Any], *, optimizer: Any, scheduler: Any, sharded: bool
) -> tuple[Position, dict[str, Any] | None]:
    """Restore optimizer, scheduler and RNG (lerobot's load_training_state); return the position and the data
    state of `document` (read_data_document's; None: a map-style run's).

    Args:
        checkpoint: the checkpoint folder resumed from.
        document: its robostream_data.json (read_data_document's).
        optimizer: the optimizer, before accelerate's prepare.
        scheduler: the learning-rate scheduler (None: none).
        sharded: FSDP: the optimizer is left as it is (its state is sharded by `prepare`, then loaded with
            lerobot's load_fsdp_optimizer_state, as lerobot-train does).

    Raises:
        ValueError: the data file belongs to another step than the training state beside it.
    """
    step, _, _ = load_training_state(checkpoint, optimizer, scheduler, load_optimizer=not sharded)
    if document["step"] != step:
        raise ValueError(
            f"{checkpoint / TRAINING_STATE_DIR / DATA_STATE} is at step {document['step']} but "
            f"{checkpoint / TRAINING_STATE_DIR} at step {step}: the checkpoint is inconsistent"
        )
    return Position(step=step, epoch=document["epoch"]), document["data"]


def _read_data_document(path: Path, checkpoint: Path) -> dict[str, Any]:
    """robostream_data.json's content, checked whole: JSON, its keys, its checksum, the data state's epoch (errors
    name the file)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: {checkpoint} was not written by robostream's training command "
            "(or not completely); resume from a checkpoint it wrote, or start a new run"
        )
    try:
        document = json.loads(path.read_bytes())
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        raise ValueError(
            f"{path} is not a JSON document ({exc}): the file is damaged (truncated?); resume from "
            "another checkpoint, or start a new run"
        ) from exc
    if not isinstance(document, dict) or not {"step", "epoch", "data", "held_out"} <= document.keys():
        raise ValueError(
            f"{path}: expected an object with 'step', 'epoch', 'data', 'held_out' and {CHECKSUM!r}, got "
            f"{json.dumps(document)[:80]}: the file is damaged; resume from another checkpoint"
        )
    check_checksum(document, where=str(path))
    data_epoch = document["data"].get("epoch") if isinstance(document["data"], dict) else document["epoch"]
    if document["epoch"] != data_epoch:  # the one the loader continues must be the one training counts
        raise ValueError(
            f"{path}: epoch {document['epoch']!r} but its data state is of epoch {data_epoch!r}: the "
            "file was edited; resume from another checkpoint"
        )
    return document


def _check_mode(document: dict[str, Any], streaming: bool, checkpoint: Path) -> None:
    """A streaming run saves the loader's state, a map-style run none (lerobot's sampler resumes from the step):
    resumed in the other mode, the state would be dropped (or misread) and other batches trained on."""
    saved = document["data"] is not None
    if saved != streaming:
        modes = {True: "streaming (--dataset.streaming=true)", False: "map-style (--dataset.streaming=false)"}
        raise ValueError(
            f"{checkpoint} was saved by a {modes[saved]} run, but this run is {modes[streaming]}: "
            "its data position does not carry over; resume with the mode it was saved with, or start "
            "a new run in another --output_dir"
        )
