"""`--dataset.eval_split`: which episodes of each dataset are held out for the eval loss.

lerobot-train's rule (lerobot/datasets/factory.py `make_train_eval_datasets`): the selected episodes, in the order
they are selected, grouped by their first task (meta/episodes' `tasks` column; "" for an episode without one); the
last ceil(n x eval_split) episodes of each group of n are held out. Here the rule applies to each source of a
mixture on its own, and the held-out episodes (one list per source) are recorded in every checkpoint: a resumed run
holds out the same ones, or stops naming both.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from robostream.errors import DatasetFormatError
from robostream.format.metadata import DatasetMetadata, episode_files, metadata_revision

HeldOut = list[list[int]]  # per source (mixture order), its held-out episode indices, sorted


def split_episodes(
    *, episodes: Sequence[int], first_tasks: Mapping[int, str], eval_split: float, where: str
) -> tuple[list[int], list[int]]:
    """lerobot's split of one dataset's episodes: (train, held out), each sorted.

    Args:
        episodes: the selected episodes, in the order they were selected (lerobot groups them in that order).
        first_tasks: each episode's first task ("" when it has none).
        eval_split: the fraction of each task's episodes held out, in (0, 1).
        where: the dataset, as errors name it.

    Raises:
        ValueError: no episode is left to train on.
    """
    by_task: dict[str, list[int]] = {}
    for episode in episodes:
        by_task.setdefault(first_tasks[episode], []).append(episode)
    train: list[int] = []
    held_out: list[int] = []
    for group in by_task.values():
        kept = len(group) - math.ceil(len(group) * eval_split)
        train += group[:kept]
        held_out += group[kept:]
    if not train:
        raise ValueError(
            f"--dataset.eval_split={eval_split} holds out all {len(held_out)} episodes of {where} "
            f"({len(by_task)} tasks: the last ceil(n x eval_split) of each task's n): lower it, or select more "
            "episodes"
        )
    return sorted(train), sorted(held_out)


def first_tasks(meta: DatasetMetadata) -> dict[int, str]:
    """Each episode's first task, from meta/episodes' `tasks` column (as lerobot reads it; robostream's episode
    table keeps only the locating columns). Local or remote: the files are found as the metadata's are."""
    storage = meta.storage
    _, files = metadata_revision(storage)
    tasks: dict[int, str] = {}
    for relative in episode_files(storage, files):
        source = io.BytesIO(files.fetched[relative]) if relative in files.fetched else storage.open(relative)
        name = storage.describe(relative)
        try:
            table = pq.ParquetFile(source).read(columns=["episode_index", "tasks"], use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetFormatError(
                f"{name}: cannot read the columns 'episode_index' and 'tasks' that --dataset.eval_split groups "
                f"episodes by ({exc})"
            ) from exc
        for episode, episode_tasks in zip(table.column("episode_index").to_pylist(), table.column("tasks").to_pylist()):
            tasks[int(episode)] = episode_tasks[0] if episode_tasks else ""
    return tasks


def check_recorded(*, recorded: HeldOut | None, computed: HeldOut | None, checkpoint: Path, eval_split: float) -> None:
    """A resumed run holds out what the checkpoint recorded: its flags and data must give the same split.

    Raises:
        ValueError: naming both splits, and what to do.
    """
    if recorded == computed:
        return
    raise ValueError(
        f"{checkpoint} was trained with held-out episodes {describe(recorded)}, but this run's "
        f"--dataset.eval_split={eval_split} over its data holds out {describe(computed)}: resume with the "
        "eval_split, episodes and sources the checkpoint was saved with (its pretrained_model/train_config.json), "
        "or start a new run in another --output_dir"
    )


def describe(held_out: HeldOut | None) -> str:
    """A split as errors name it: per source, its held-out episodes."""
    if held_out is None:
        return "none (no eval split)"
    return "; ".join(f"source {i}: {episodes}" for i, episodes in enumerate(held_out))
