"""Bad input and bad places: a clear error that names the file, and the input left as it was."""

from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.errors import DatasetFormatError, RobostreamError
from tests.convert.conftest import DATA_MB, VIDEO_MB, convert_args, copy_tree, run_cli, tree_listing


def attempt(root: Path, out: Path):
    return convert(root, out=out, workers=1, data_file_size_in_mb=DATA_MB, video_file_size_in_mb=VIDEO_MB,
                   log=lambda line: None)


def damaged(v21_root: Path, tmp_path: Path, damage) -> tuple[Path, dict[str, bytes]]:
    root = copy_tree(v21_root, tmp_path / "ds")
    damage(root)
    return root, tree_listing(root)


@pytest.mark.parametrize("what, damage, expected", [
    ("missing mp4", lambda r: (r / "videos/chunk-000/observation.images.cam1/episode_000004.mp4").unlink(),
     "videos/chunk-000/observation.images.cam1/episode_000004.mp4: missing (episode 4)"),
    ("missing parquet", lambda r: (r / "data/chunk-000/episode_000002.parquet").unlink(),
     "data/chunk-000/episode_000002.parquet: missing (episode 2)"),
    ("stray file", lambda r: (r / "data/chunk-000/episode_000002 (copy).parquet").write_bytes(b"x"),
     "episode_000002 (copy).parquet: stray file"),
    ("row count", lambda r: (r / "meta/episodes.jsonl").write_text(
        (r / "meta/episodes.jsonl").read_text().replace('"length": ', '"length": 1', 1)),
     "rows, but meta/episodes.jsonl says episode 0 has 1"),
    ("gapped episodes", lambda r: (r / "meta/episodes.jsonl").write_text(
        "".join(line for line in (r / "meta/episodes.jsonl").read_text().splitlines(keepends=True)
                if '"episode_index": 3,' not in line)), "missing [3]"),
    ("truncated mp4", lambda r: (r / "videos/chunk-000/observation.images.cam0/episode_000001.mp4").write_bytes(
        (r / "videos/chunk-000/observation.images.cam0/episode_000001.mp4").read_bytes()[:100]),
     "episode_000001.mp4: has no video stream"),
])
def test_bad_dataset_is_refused_before_writing_naming_the_file(what, damage, expected, v21_root: Path,
                                                               tmp_path: Path):
    root, before = damaged(v21_root, tmp_path, damage)
    with pytest.raises(DatasetFormatError) as info:
        attempt(root, tmp_path / "out")
    assert expected in str(info.value), (what, str(info.value))
    assert "nothing was written" in str(info.value) or what == "gapped episodes"  # (read_v21 refuses those)
    assert tree_listing(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no output, no work dir


def test_a_camera_whose_files_differ_in_size_is_refused(v21_root: Path, v21_h264_root: Path, tmp_path: Path):
    root = copy_tree(v21_root, tmp_path / "ds")
    other = v21_h264_root / "videos/chunk-000/observation.images.cam0/episode_000001.mp4"  # h264, 80x64
    target = root / "videos/chunk-000/observation.images.cam0/episode_000001.mp4"
    target.write_bytes(other.read_bytes())
    with pytest.raises(DatasetFormatError, match="episode_000001.mp4: .*differs from the first episode's"):
        attempt(root, tmp_path / "out")


def test_v30_input_and_non_datasets_are_refused(reference: Path, tmp_path: Path):
    with pytest.raises(DatasetFormatError, match=r"codebase_version is 'v3.0' \(already converted\)"):
        attempt(reference, tmp_path / "out")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos/cat.jpg").write_bytes(b"jpeg")
    with pytest.raises(DatasetFormatError, match="photos/meta/info.json: missing; .* is not a LeRobot dataset"):
        attempt(tmp_path / "photos", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_existing_out_and_a_work_dir_on_another_filesystem_are_refused(v21_root: Path, tmp_path: Path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="taken: already exists"):
        attempt(v21_root, tmp_path / "taken")
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's temp dir")
    with pytest.raises(RobostreamError, match="is on another filesystem"):
        convert(v21_root, out=tmp_path / "out", work_dir=shm / f"robostream-test-{os.getpid()}", log=print)


FILE_LIMIT = 30_000  # above the plan and its stats (~21 KB), below the largest camera file (~38 KB)


def _limit_file_size() -> None:
    """A full disk, as the converter sees it: writes past 30 KB fail (EFBIG) instead of killing the process."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def test_full_disk_fails_naming_the_file_leaves_the_input_and_a_rerun_finishes(v21_root: Path, reference: Path,
                                                                                 tmp_path: Path):
    root = copy_tree(v21_root, tmp_path / "ds")
    before = tree_listing(root)
    assert max(p.stat().st_size for p in reference.rglob("*.mp4")) > FILE_LIMIT  # some output cannot be written
    args = convert_args(root, "--workers", "2")
    failed = run_cli("convert", *args, preexec_fn=_limit_file_size)
    assert failed.returncode == 2, failed.stderr
    assert "failed 3 times" in failed.stderr and "File too large" in failed.stderr and ".mp4" in failed.stderr
    assert tree_listing(root) == before
    resumed = run_cli("convert", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert compare_datasets(root, reference) == []
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["output"] == str(root)


def test_in_place_with_an_old_copy_already_there_is_refused_before_any_work(v21_root: Path, tmp_path: Path):
    root = copy_tree(v21_root, tmp_path / "ds")
    (tmp_path / "ds_old").mkdir()
    with pytest.raises(FileExistsError, match="ds_old: exists; an in-place conversion keeps the input there"):
        convert(root, workers=1, log=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ds_old"]
