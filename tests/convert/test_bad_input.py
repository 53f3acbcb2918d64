"""Bad input and bad places: a clear error that names the file, and the input left as it was."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
from pathlib import Path

import pytest

from robostream.convert import convert
from robostream.convert.compare import compare_datasets
from robostream.errors import DatasetFormatError, RobostreamError
from tests.helpers import DATA_MB, VIDEO_MB, convert_args, copy_tree, run_cli, tree_listing


def attempt(root: Path, out: Path):
    return convert(
        root, out=out, workers=1, data_file_size_in_mb=DATA_MB, video_file_size_in_mb=VIDEO_MB, log=lambda line: None
    )


def damaged(v21_root: Path, tmp_path: Path, damage) -> tuple[Path, dict[str, bytes]]:
    root = copy_tree(v21_root, tmp_path / "ds")
    damage(root)
    return root, tree_listing(root)


@pytest.mark.parametrize(
    "what, damage, expected",
    [
        (
            "missing mp4",
            lambda r: (r / "videos/chunk-000/observation.images.cam1/episode_000004.mp4").unlink(),
            "videos/chunk-000/observation.images.cam1/episode_000004.mp4: missing (episode 4)",
        ),
        (
            "missing parquet",
            lambda r: (r / "data/chunk-000/episode_000002.parquet").unlink(),
            "data/chunk-000/episode_000002.parquet: missing (episode 2)",
        ),
        (
            "stray file",
            lambda r: (r / "data/chunk-000/episode_000002 (copy).parquet").write_bytes(b"x"),
            "episode_000002 (copy).parquet: stray file",
        ),
        (
            "row count",
            lambda r: (r / "meta/episodes.jsonl").write_text(
                (r / "meta/episodes.jsonl").read_text().replace('"length": ', '"length": 1', 1)
            ),
            "rows, but meta/episodes.jsonl says episode 0 has 1",
        ),
        (
            "gapped episodes",
            lambda r: (r / "meta/episodes.jsonl").write_text(
                "".join(
                    line
                    for line in (r / "meta/episodes.jsonl").read_text().splitlines(keepends=True)
                    if '"episode_index": 3,' not in line
                )
            ),
            "missing [3]",
        ),
        (
            "stats not numbers",
            lambda r: (r / "meta/episodes_stats.jsonl").write_text(
                re.sub(r'"mean": \[-?[0-9.e]+', '"mean": [null', (r / "meta/episodes_stats.jsonl").read_text(), count=1)
            ),
            "hold values that are not numbers",
        ),
        (
            "truncated mp4",
            lambda r: (r / "videos/chunk-000/observation.images.cam0/episode_000001.mp4").write_bytes(
                (r / "videos/chunk-000/observation.images.cam0/episode_000001.mp4").read_bytes()[:100]
            ),
            "episode_000001.mp4: has no video stream",
        ),
    ],
)
def test_bad_dataset_is_refused_before_writing_naming_the_file(what, damage, expected, v21_root: Path, tmp_path: Path):
    root, before = damaged(v21_root, tmp_path, damage)
    with pytest.raises(DatasetFormatError) as info:
        attempt(root, tmp_path / "out")
    assert expected in str(info.value), (what, str(info.value))
    # (read_v21 and read_episode_stats refuse those, before the preflight that says so)
    assert "nothing was written" in str(info.value) or what in ("gapped episodes", "stats not numbers")
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


def test_full_disk_fails_naming_the_file_leaves_the_input_and_a_rerun_finishes(
    v21_root: Path, reference: Path, tmp_path: Path
):
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


@pytest.mark.parametrize(
    "victim",
    [
        "data/chunk-000/episode_000002.parquet",
        "videos/chunk-000/observation.images.cam0/episode_000001.mp4",
        "meta/episodes.jsonl",
        "meta/tasks.jsonl",
        "videos",
    ],
)
def test_symlinks_out_of_the_dataset_are_refused_never_copied(v21_root: Path, tmp_path: Path, victim: str):
    """The converter follows the readers' one safe-path rule (issue 21: it used to open /etc/passwd through a
    link and copy it into the output)."""
    root = copy_tree(v21_root, tmp_path / "ds")
    outside = tmp_path / "outside"
    (root / victim).rename(outside)  # the real content now lies outside, reached through a link
    (root / victim).symlink_to(outside, target_is_directory=outside.is_dir())
    with pytest.raises(DatasetFormatError, match="outside the dataset root"):
        attempt(root, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "outside"]  # no output, no work dir


def test_a_video_at_another_frame_rate_or_size_is_refused_before_writing(v21_root: Path, tmp_path: Path):
    import av

    from robostream.video.encode import encode_video

    root = copy_tree(v21_root, tmp_path / "ds")
    victim = root / "videos/chunk-000/observation.images.cam1/episode_000003.mp4"
    with av.open(str(victim)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    encode_video(frames, victim, fps=40, codec="av1", gop=2)
    with pytest.raises(
        DatasetFormatError,
        match=r"episode_000003.mp4: runs at 40 fps, but meta/info.json says the "
        "dataset's fps is 20",
    ):
        attempt(root, tmp_path / "out")
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.images.cam1"]["shape"] = [32, 32, 3]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(
        DatasetFormatError,
        match=r"frames of 64x64 \(height x width\), but meta/info.json declares "
        "32x32",
    ):
        attempt(root, tmp_path / "out")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda info: info.update(fps=float("nan")), "'fps': expected a finite number, got nan"),
        (
            lambda info: info["features"].update(
                {"observation.images.c\nam": info["features"]["observation.images.cam0"]}
            ),
            "control characters",
        ),
        (
            lambda info: info["features"].update({"observation/cam": info["features"]["observation.images.cam0"]}),
            "camera key 'observation/cam' contains '/'",
        ),
    ],
)
def test_bad_info_json_values_are_refused_naming_the_key(v21_root: Path, tmp_path: Path, edit, message):
    root = copy_tree(v21_root, tmp_path / "ds")
    info = json.loads((root / "meta/info.json").read_text())
    edit(info)
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError, match=message):
        attempt(root, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("data_file_size_in_mb", 0, "data_file_size_in_mb: must be > 0"),
        ("data_file_size_in_mb", -5, "data_file_size_in_mb: must be > 0"),
        ("data_file_size_in_mb", float("nan"), "data_file_size_in_mb: expected a finite number, got nan"),
        ("video_file_size_in_mb", float("inf"), "video_file_size_in_mb: expected a finite number, got inf"),
        ("workers", 0, "workers: must be >= 1, got 0"),
        ("max_attempts", 0, "max_attempts: must be >= 1, got 0"),
        ("lease_s", float("nan"), "lease_s: expected a finite number"),
        ("executor", "spark", "executor='spark': expected one of"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(v21_root: Path, tmp_path: Path, argument, value, message):
    with pytest.raises(ValueError, match=message):
        convert(v21_root, out=tmp_path / "out", log=lambda line: None, **{argument: value})
    assert list(tmp_path.iterdir()) == []


def test_the_cli_names_a_bad_argument(v21_root: Path, tmp_path: Path):
    result = run_cli("convert", str(v21_root), "--out", str(tmp_path / "out"), "--data-file-size-in-mb", "nan")
    assert result.returncode != 0 and "data_file_size_in_mb: expected a finite number, got nan" in result.stderr
    assert list(tmp_path.iterdir()) == []
