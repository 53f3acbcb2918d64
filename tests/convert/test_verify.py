"""`robostream verify` finds what is wrong with a v3.0 dataset, naming the file and the episode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from robostream.convert.verify import verify
from robostream.format.metadata import load_metadata
from tests.helpers import run_cli

EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def _edit_episodes(root: Path, column: str, episode: int, delta: float) -> None:
    table = pq.read_table(root / EPISODES)
    values = table.column(column).to_pylist()
    values[episode] += delta
    table = table.set_column(
        table.column_names.index(column), column, pa.array(values, table.schema.field(column).type)
    )
    pq.write_table(table, root / EPISODES)


def test_a_consistent_dataset_verifies_through_the_cli(reference: Path):
    result = run_cli("verify", str(reference))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["problems"] == []


def test_a_shifted_video_span_is_reported_with_its_file_and_episode(reference: Path, tmp_path: Path):
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    _edit_episodes(root, "videos/observation.images.cam0/from_timestamp", 2, 0.5)
    problems = verify(root)["problems"]  # the readers refuse the table: that one error is the finding
    assert len(problems) == 1 and "episode 2 camera 'observation.images.cam0': video span" in problems[0]
    result = run_cli("verify", str(root))
    assert result.returncode == 1 and "episode 2" in result.stdout


def test_a_missing_row_is_reported_with_its_file_and_episode(reference: Path, tmp_path: Path):
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    first_episode = table.column("episode_index")[0].as_py()
    keep = pc.invert(pc.equal(table.column("index"), table.column("index")[1]))  # drop the episode's 2nd row
    pq.write_table(table.filter(keep), path)
    problems = verify(root)["problems"]
    assert any(str(path) in p and f"episode {first_episode} has" in p for p in problems)


def _rewrite_data(root: Path, edit) -> Path:
    path = root / "data/chunk-000/file-000.parquet"
    pq.write_table(edit(pq.read_table(path)), path)
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.drop_columns(["action"]), "lacks column(s) ['action'] that meta/info.json declares"),
        (lambda t: t.drop_columns(["frame_index"]), "lacks column(s) ['frame_index']"),
        (
            lambda t: t.set_column(
                t.column_names.index("observation.state"),
                "observation.state",
                pa.array([[0.0] * 2] * t.num_rows, pa.list_(pa.float32(), 2)),
            ),
            "column 'observation.state' holds [2] per frame, but meta/info.json declares shape [4]",
        ),
        (
            lambda t: t.set_column(
                t.column_names.index("timestamp"), "timestamp", pa.array([float("nan")] * t.num_rows, pa.float32())
            ),
            "has timestamp nan",
        ),
        (lambda t: t.filter(pc.not_equal(t.column("episode_index"), t.column("episode_index")[0])), "has 0 rows"),
    ],
)
def test_what_the_readers_refuse_fails_verify(reference: Path, tmp_path: Path, edit, message):
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    path = _rewrite_data(root, edit)
    problems = verify(root)["problems"]
    assert any(str(path) in p and message in p for p in problems), problems


def test_a_video_of_another_size_or_rate_fails_verify(reference: Path, tmp_path: Path):
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.images.cam1"]["shape"] = [32, 32, 3]
    (root / "meta/info.json").write_text(json.dumps(info))
    problems = verify(root)["problems"]
    assert problems and all("declares 32x32 for 'observation.images.cam1'" in p for p in problems)


def test_a_span_shifted_a_frame_at_both_ends_fails_verify(reference: Path, tmp_path: Path):
    """The shifted span keeps its length (issue 32, defect 9: verify passed it) but overlaps the next episode's
    span in the same camera file."""
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    meta = load_metadata(root)
    key = "observation.images.cam0"
    episode = next(e for e in range(len(meta.episodes) - 1) if meta.video_file(e, key) == meta.video_file(e + 1, key))
    for end in ("from_timestamp", "to_timestamp"):
        _edit_episodes(root, f"videos/{key}/{end}", episode, 1 / meta.fps)
    problems = verify(root)["problems"]
    assert len(problems) == 1, problems
    assert (
        f"camera '{key}': in {meta.video_file(episode, key)} the video spans of episode {episode} " in problems[0]
        and f"and episode {episode + 1} " in problems[0]
        and "overlap" in problems[0]
    ), problems
