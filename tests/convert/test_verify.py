"""`robostream verify` finds what is wrong with a v3.0 dataset, naming the file and the episode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robostream.convert.verify import verify
from tests.convert.conftest import run_cli

EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def _edit_episodes(root: Path, column: str, episode: int, delta: float) -> None:
    table = pq.read_table(root / EPISODES)
    values = table.column(column).to_pylist()
    values[episode] += delta
    table = table.set_column(table.column_names.index(column), column, pa.array(values, table.schema.field(column).type))
    pq.write_table(table, root / EPISODES)


def test_a_consistent_dataset_verifies_through_the_cli(reference: Path):
    result = run_cli("verify", str(reference))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["problems"] == []


def test_a_shifted_video_span_is_reported_with_its_file_and_episode(reference: Path, tmp_path: Path):
    root = Path(shutil.copytree(reference, tmp_path / "ds"))
    _edit_episodes(root, "videos/observation.images.cam0/from_timestamp", 2, 0.5)
    problems = verify(root)["problems"]
    assert problems and all("observation.images.cam0" in p for p in problems)
    assert any("for episode 2, which has" in p for p in problems)
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
