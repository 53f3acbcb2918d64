"""Both dataset writers delete only what they made (issue 32): the staging folder of a write lives in a scratch
folder beside the root, marked before anything is put in it; a user's folder or file named like the writers' old
fixed names (`.<root>.writing`, `.<root>.old`) or like a scratch folder is left alone, and a root that is a link is
replaced as a link."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from robostream.durable import SCRATCH_MARKER
from robostream.writer.v21 import V21Writer
from robostream.writer.v30 import DatasetWriter
from tests.helpers import tree_listing

FEATURES = {"observation.state": {"dtype": "float32", "shape": [2], "names": None}}
WRITERS = {"v30": DatasetWriter, "v21": V21Writer}


def _write(writer_name: str, root: Path, value: float, *, overwrite: bool = False) -> None:
    """A one-episode dataset of 3 frames whose state is `value` (no cameras: no encoding needed)."""
    with WRITERS[writer_name](root, 10, FEATURES, overwrite=overwrite) as writer:
        extra = {"video_files": {}, "video_stats": {}} if writer_name == "v21" else {}
        writer.add_episode({"observation.state": np.full((3, 2), value, dtype=np.float32)}, task="t", **extra)


def _first_state(root: Path) -> float:
    """The first state value of the dataset's (only) data file, read from the file (either layout)."""
    [data] = (root / "data").rglob("*.parquet")
    return pq.read_table(data).column("observation.state").to_pylist()[0][0]


def _beside(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir())


@pytest.mark.parametrize("writer_name", WRITERS)
def test_a_write_keeps_folders_and_files_it_did_not_make(writer_name, tmp_path):
    """A user keeps `.ds.writing/` and `.ds.old/` folders (the names the writers used to delete unchecked), a
    `.ds.writing-notes/` folder and a `.ds.writing-x` file beside the dataset: rewriting it leaves them as they were
    and warns about the two named like its scratch folders."""
    root = tmp_path / "ds"
    _write(writer_name, root, 1.0)
    users = {".ds.writing": "draft", ".ds.old": "backup", ".ds.writing-notes": "notes"}
    for name, text in users.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text(text)
    (tmp_path / ".ds.writing-x").write_text("a file")

    with pytest.warns(
        UserWarning,
        match=r"\['.ds.writing-notes', '.ds.writing-x'\] look like the scratch folders of "
        "robostream's dataset writers but lack their .robostream-scratch marker",
    ):
        _write(writer_name, root, 2.0, overwrite=True)

    for name, text in users.items():
        assert tree_listing(tmp_path / name) == {"mine.txt": text.encode()}
    assert (tmp_path / ".ds.writing-x").read_text() == "a file"
    assert _beside(root) == sorted([*users, ".ds.writing-x", "ds"])
    assert _first_state(root) == 2.0


@pytest.mark.parametrize("writer_name", WRITERS)
def test_a_root_that_is_a_link_is_replaced_as_a_link(writer_name, tmp_path):
    """overwrite=True on a root that links to a dataset elsewhere: the link becomes the new dataset, the dataset it
    named is untouched and nothing is left beside the root (the writers used to leave the link as `.ds.old`)."""
    elsewhere = tmp_path / "other-disk" / "ds"
    _write(writer_name, elsewhere, 1.0)
    kept = tree_listing(elsewhere)
    root = tmp_path / "work" / "ds"
    root.parent.mkdir()
    root.symlink_to(elsewhere)

    _write(writer_name, root, 2.0, overwrite=True)

    assert root.is_dir() and not root.is_symlink()
    assert tree_listing(elsewhere) == kept
    assert _beside(root) == ["ds"]
    assert _first_state(root) == 2.0


KILLED_WRITE = """
import os, signal, sys
import numpy as np
from robostream.writer.v30 import DatasetWriter
writer = DatasetWriter(sys.argv[1], 10, {"observation.state": {"dtype": "float32", "shape": [2], "names": None}},
                       overwrite=True)
writer.add_episode({"observation.state": np.zeros((3, 2), dtype=np.float32)}, task="t")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_write_leaves_the_dataset_and_its_marked_scratch_which_the_next_write_removes(tmp_path):
    root = tmp_path / "ds"
    _write("v30", root, 1.0)
    before = tree_listing(root)
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(root)], cwd=Path(__file__).parents[2])
    assert killed.returncode == -signal.SIGKILL
    assert tree_listing(root) == before
    [left] = [p for p in tmp_path.iterdir() if p.name != "ds"]
    assert left.name.startswith(".ds.writing-") and (left / SCRATCH_MARKER).is_file()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing foreign: no warning
        _write("v30", root, 2.0, overwrite=True)

    assert _beside(root) == ["ds"]
    assert _first_state(root) == 2.0
