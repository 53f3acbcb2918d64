"""Checkpoints in lerobot's layout, plus the data position, committed by one rename.

`<output_dir>/checkpoints/<step>/pretrained_model/` is lerobot's (policy config and weights, processors with their
stats, train_config.json: what `lerobot-eval --policy.path=...` and `from_pretrained` load) and `training_state/`
too (optimizer, scheduler, RNG, step), written by lerobot's own `save_checkpoint`. robostream adds
`training_state/robostream_data.json`: the epoch and the streaming loader's state, so `--resume` continues with the
batches an uninterrupted run would have seen, on any number of processes. lerobot writes straight into the step's
folder; here it is written into a temporary sibling, flushed to disk, renamed, then `last` is replaced by a link to
it in one rename: a kill (or a node's crash) at any point leaves `last` naming a complete checkpoint.
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

from robostream.durable import fsync_dir, fsync_tree

DATA_STATE = "robostream_data.json"


@dataclass
class Position:
    """Where training is: optimisation steps done and the epoch the data position belongs to."""

    step: int = 0
    epoch: int = 0


def save(*, cfg: Any, position: Position, data_state: dict[str, Any] | None, num_processes: int,
         **parts: Any) -> Path:
    """Write the checkpoint of `position.step` (main process only) and make it `last`.

    Args:
        cfg: the training config (saved as train_config.json).
        position: the step and epoch.
        data_state: the streaming loader's state_dict (None for map-style: lerobot's step arithmetic resumes it).
        num_processes: the processes training (recorded, as lerobot does).
        parts: policy, optimizer, scheduler, preprocessor, postprocessor for lerobot's save_checkpoint.
    """
    final = get_step_checkpoint_dir(cfg.output_dir, cfg.steps, position.step)
    last = final.parent / LAST_CHECKPOINT_LINK
    named = last.resolve() if last.is_symlink() else None
    for left in final.parent.glob(".tmp-*"):  # left by interrupted saves (this process is the only writer)
        if left.is_symlink():
            left.unlink()
        elif left.resolve() != named:  # a checkpoint moved aside that `last` still names is kept
            shutil.rmtree(left)
    tmp = final.with_name(f".tmp-{final.name}")
    save_checkpoint(checkpoint_dir=tmp, step=position.step, cfg=cfg, num_processes=num_processes,
                    batch_size=cfg.batch_size, **parts)
    state = {"step": position.step, "epoch": position.epoch, "data": data_state}
    (tmp / TRAINING_STATE_DIR / DATA_STATE).write_text(json.dumps(state))
    fsync_tree(tmp)
    aside = None
    if final.exists():  # a run resumed from an older checkpoint saves a step saved before: move that one aside
        aside = final.with_name(f".tmp-old-{final.name}")
        os.replace(final, aside)
        if named == final.resolve():  # `last` named it: it names it again at once (a window of one rename)
            _point_last(aside)
    os.replace(tmp, final)
    _point_last(final)
    if aside is not None:
        shutil.rmtree(aside)
    return final


def _point_last(checkpoint: Path) -> None:
    """`last` -> `checkpoint` (relative, as lerobot links it) in one rename: never missing, never half-made."""
    link = checkpoint.parent / LAST_CHECKPOINT_LINK
    new = link.with_name(f".tmp-{LAST_CHECKPOINT_LINK}")
    new.unlink(missing_ok=True)
    new.symlink_to(checkpoint.name)
    os.replace(new, link)
    fsync_dir(checkpoint.parent)


def load(checkpoint: Path, *, optimizer: Any, scheduler: Any) -> tuple[Position, dict[str, Any] | None]:
    """Restore optimizer, scheduler and RNG (lerobot's load_training_state); return the position and the data
    state saved with them."""
    step, _, _ = load_training_state(checkpoint, optimizer, scheduler)
    path = checkpoint / TRAINING_STATE_DIR / DATA_STATE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {checkpoint} was not written by robostream's training command "
                                "(or not completely); resume from a checkpoint it wrote, or start a new run")
    state = json.loads(path.read_text())
    if state["step"] != step:
        raise ValueError(f"{path} is at step {state['step']} but {checkpoint / TRAINING_STATE_DIR} at step {step}: "
                         "the checkpoint is inconsistent")
    return Position(step=step, epoch=state["epoch"]), state["data"]
