"""`robostream train`'s checkpoint saves delete only what they made (issue 32, defect 11): a user's folder or file
named `.tmp-*` beside the checkpoints used to be deleted (or crash the save), and re-saving a step whose folder is
a symlink crashed after the save. Opt-in like the other lerobot tests (ROBOSTREAM_LEROBOT_PYTHON)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from robostream.synth import generate
from tests.helpers import tree_listing
from tests.lerobot_train.test_train_command import TINY, WEIGHTS, single, tensor_bytes, train


@pytest.fixture(scope="module")
def root(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("tiny") / "ds", TINY)


def test_a_save_keeps_what_it_did_not_make_and_replaces_a_linked_step_folder(lerobot_python, hf_home, root, tmp_path):
    """A run saved steps 4 and 8; then the user keeps notes in `checkpoints/.tmp-notes/`, leaves a file `.tmp-x`,
    moves checkpoint 8 to another disk behind a symlink (`last` names it through the link), and resumes from
    checkpoint 4: the resumed run saves step 8 again. The notes, the file and the moved checkpoint stay as they were;
    `000008` becomes the new checkpoint (the link replaced, not followed) and `last` names it; no scratch folder is
    left; a warning names what was left alone."""
    args = ["--batch_size=8", "--num_workers=0"]
    train(lerobot_python, hf_home, single(root, tmp_path / "run", tmp_path / "a.jsonl", 8, *args))
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / ".tmp-notes").mkdir()
    (checkpoints / ".tmp-notes" / "notes.txt").write_text("lr 1e-4 diverged at step 6")
    (checkpoints / ".tmp-x").write_text("a file")
    moved = tmp_path / "other-disk" / "000008"
    moved.parent.mkdir()
    shutil.move(checkpoints / "000008", moved)
    (checkpoints / "000008").symlink_to(moved)
    kept = tree_listing(moved)
    assert os.readlink(checkpoints / "last") == "000008"

    stderr = train(
        lerobot_python,
        hf_home,
        ["--resume=true", f"--config_path={checkpoints / '000004' / 'pretrained_model' / 'train_config.json'}"],
    )

    assert tree_listing(checkpoints / ".tmp-notes") == {"notes.txt": b"lr 1e-4 diverged at step 6"}
    assert (checkpoints / ".tmp-x").read_text() == "a file"
    assert tree_listing(moved) == kept
    assert (checkpoints / "000008").is_dir() and not (checkpoints / "000008").is_symlink()
    assert tensor_bytes(checkpoints / "000008" / WEIGHTS).keys() == tensor_bytes(moved / WEIGHTS).keys()
    assert os.readlink(checkpoints / "last") == "000008"
    assert sorted(p.name for p in checkpoints.iterdir()) == [".tmp-notes", ".tmp-x", "000004", "000008", "last"]
    assert "['.tmp-notes', '.tmp-x'] look like the scratch folders of robostream's checkpoint saves" in stderr
