"""The work dir is the conversion's own: it never takes, and never deletes, a folder holding anything else
(issue 21, defect 1: `--work-dir DIR` used to delete DIR with the user's files, the input or the output in it), and
at the end it removes only what it made (issue 32, defect 12: files added to a work dir a killed run left behind
were deleted by the resumed run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.convert.faults import ENV_VAR, MARK_VAR
from robostream.convert.workdir import MARKER
from robostream.errors import RobostreamError
from tests.helpers import DATA_MB, VIDEO_MB, convert_args, copy_tree, run_cli, tree_listing


def attempt(root: Path, *, out: Path | None, work_dir: Path | None):
    return convert(
        root,
        out=out,
        work_dir=work_dir,
        workers=1,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        log=lambda line: None,
    )


def test_a_work_dir_holding_user_files_is_refused_and_left_intact(v21_root: Path, tmp_path: Path):
    mine = tmp_path / "my-files"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(
        RobostreamError,
        match=r"my-files: exists and holds files that are not a robostream "
        "conversion's",
    ):
        attempt(v21_root, out=tmp_path / "out", work_dir=mine)
    assert tree_listing(mine) == {"thesis.tex": b"years of work"}
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "where, relation",
    [
        (lambda ds, out: ds, "is the input"),
        (lambda ds, out: ds / "meta", "lies inside the input"),
        (lambda ds, out: ds.parent, "contains the input"),
        (lambda ds, out: out.parent, "contains"),
    ],
)
def test_a_work_dir_overlapping_the_input_or_output_is_refused(v21_root: Path, tmp_path: Path, where, relation):
    ds = copy_tree(v21_root, tmp_path / "area" / "ds")
    out = tmp_path / "area" / "converted" / "v30"
    before = tree_listing(tmp_path)
    with pytest.raises(RobostreamError, match=f"--work-dir .*: {relation}"):
        attempt(ds, out=out, work_dir=where(ds, out))
    assert tree_listing(tmp_path) == before


def test_in_place_work_dir_inside_the_input_is_refused(v21_root: Path, tmp_path: Path):
    ds = copy_tree(v21_root, tmp_path / "ds")
    before = tree_listing(ds)
    with pytest.raises(RobostreamError, match="lies inside the input"):
        convert(ds, work_dir=ds / "work", workers=1, log=lambda line: None)
    assert tree_listing(ds) == before


def test_a_created_work_dir_is_removed_an_adopted_empty_one_is_kept(v21_root: Path, reference: Path, tmp_path: Path):
    created = tmp_path / "new-work"
    attempt(v21_root, out=tmp_path / "a", work_dir=created)
    assert not created.exists() and compare_datasets(tmp_path / "a", reference) == []
    adopted = tmp_path / "empty-work"
    adopted.mkdir()
    attempt(v21_root, out=tmp_path / "b", work_dir=adopted)
    assert adopted.is_dir() and list(adopted.iterdir()) == []  # emptied of what the conversion put there only
    assert compare_datasets(tmp_path / "b", reference) == []


def test_a_refused_input_leaves_no_work_dir(v21_root: Path, tmp_path: Path):
    ds = copy_tree(v21_root, tmp_path / "ds")
    (ds / "data/chunk-000/episode_000002.parquet").unlink()
    with pytest.raises(RobostreamError, match="missing"):
        attempt(ds, out=tmp_path / "out", work_dir=tmp_path / "work")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def planned(v21_root: Path, tmp_path: Path) -> Path:
    """The work dir a dry run planned into (tmp_path / "work")."""
    work = tmp_path / "work"
    convert(
        v21_root,
        out=tmp_path / "out",
        work_dir=work,
        workers=1,
        data_file_size_in_mb=DATA_MB,
        video_file_size_in_mb=VIDEO_MB,
        dry_run=True,
        log=lambda line: None,
    )
    return work


def test_a_marked_work_dir_resumes(v21_root: Path, reference: Path, tmp_path: Path):
    """A dry run plans into the work dir (marked); the real run takes it over and finishes."""
    work = planned(v21_root, tmp_path)
    assert (work / MARKER).is_file() and (work / "plan.json").is_file()
    attempt(v21_root, out=tmp_path / "out", work_dir=work)
    assert not work.exists() and compare_datasets(tmp_path / "out", reference) == []


def test_a_work_dir_planned_by_another_version_is_refused_naming_it(v21_root: Path, tmp_path: Path):
    """A plan whose version this robostream does not read (its arrays in another format: plan version 2 kept them
    in .npz files) is an error that names the work dir and says what to do, not a missing file mid-resume."""
    work = planned(v21_root, tmp_path)
    plan = json.loads((work / "plan.json").read_text())
    (work / "plan.json").write_text(json.dumps({**plan, "version": 2}))
    with pytest.raises(RobostreamError, match=rf"plan version 2, this one reads 3\); remove {work}"):
        attempt(v21_root, out=tmp_path / "out", work_dir=work)
    assert (work / "plan.json").is_file()


@pytest.mark.parametrize("adopted", [False, True], ids=["created", "adopted"])
def test_files_added_to_a_work_dir_left_by_a_kill_survive_the_resumed_run(
    v21_root: Path, reference: Path, tmp_path: Path, adopted: bool
):
    """A conversion SIGKILLed after its first file, the user's notes dropped into the work dir it left, the same
    command again: the conversion finishes, removes what it made and keeps the folder with the user's files (a
    warning names them); a later rerun finds the finished conversion and does nothing."""
    work = tmp_path / "work"
    if adopted:
        work.mkdir()
    args = convert_args(v21_root, "--workers", "1", "--out", str(tmp_path / "out"), "--work-dir", str(work))
    killed = run_cli("convert", *args, env={ENV_VAR: "task-done:run", MARK_VAR: str(tmp_path / "killed")})
    assert killed.returncode == -9, killed.stderr
    assert (work / MARKER).is_file() and (work / "plan.json").is_file()
    (work / "notes.txt").write_text("why the run died")
    (work / "mine").mkdir()
    (work / "mine" / "trace.bin").write_bytes(b"\x00\x01")
    resumed = run_cli("convert", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and compare_datasets(tmp_path / "out", reference) == []
    assert tree_listing(work) == {"mine/trace.bin": b"\x00\x01", "notes.txt": b"why the run died"}
    assert sorted(p.name for p in work.iterdir()) == ["mine", "notes.txt"]  # the marker and the layout are gone
    assert f"{work}: kept, holding ['mine', 'notes.txt'], which the conversion did not make" in resumed.stderr
    again = run_cli("convert", *args)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["already_converted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed", "out", "work"]
