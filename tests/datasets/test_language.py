"""Language columns (lerobot-annotate's `language_persistent` and `language_events`): each sample carries its
frame's rows as lerobot returns them (lists of dicts with lerobot's fields, in its order), map-style and streaming
alike; whole batches keep them as lists of B values, as the per-sample collate does; mixtures check or fill them;
a bad cell is an error naming the file, the key, the episode and the frame."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from robostream import LeRobotDataset, Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset
from robostream.datasets.collate import collate_samples
from robostream.errors import DatasetFormatError
from robostream.format.language import (
    LANGUAGE_EVENTS,
    LANGUAGE_PERSISTENT,
    ROW_FIELDS,
    SAY_TOOL_SCHEMA,
    language_arrow_type,
)
from robostream.synth import camera_key, episode_language, generate
from tests.datasets.test_batch_assembly import assert_same_batches
from tests.helpers import AV1_CONFIG

LANGUAGE = (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS)
# The same features, shapes and fps as av1_root (so the two can be mixed), plus the language columns.
CONFIG = dataclasses.replace(AV1_CONFIG, episodes=4, language=True)


@pytest.fixture(scope="module")
def language_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("language") / "ds", CONFIG)


def expected_cells(episode: int, length: int) -> dict[str, list[list[dict]]]:
    """What lerobot returns for the rows synth wrote: every field of lerobot's row schema, in its order."""
    written = episode_language(episode, length, CONFIG.fps, camera_key(0))
    return {
        key: [[{f: row.get(f) for f in ROW_FIELDS[key]} for row in cell] for cell in cells]
        for key, cells in written.items()
    }


def test_samples_carry_their_frames_rows_map_style_and_streaming(language_root):
    dataset = LeRobotDataset(root=language_root)
    assert len(list((language_root / "data").glob("chunk-*/file-*.parquet"))) >= 2  # episodes across files
    streamed = {int(s["index"]): s for s in StreamingLeRobotDataset(root=language_root, shuffle=False)}
    events = 0
    for i in range(len(dataset)):
        sample = dataset[i]
        episode, frame = int(sample["episode_index"]), int(sample["frame_index"])
        expected = expected_cells(episode, dataset.meta.episodes.length[episode])
        for key in LANGUAGE:
            assert sample[key] == expected[key][frame], (i, key)
            assert list(sample[key][0] if sample[key] else ROW_FIELDS[key]) == list(ROW_FIELDS[key])
            assert streamed[i][key] == sample[key], (i, key)
        events += bool(sample[LANGUAGE_EVENTS])
    assert events == 2 * CONFIG.episodes  # an interjection and a question per episode, on their frames only
    assert list(dataset[0])[:-1] == list(streamed[0])[:-1]  # same key order on both paths


def test_tools_come_from_info_json_else_lerobots_default(language_root, av1_root):
    assert LeRobotDataset(root=language_root).meta.tools == [SAY_TOOL_SCHEMA]
    tools = LeRobotDataset(root=av1_root).meta.tools
    assert tools == [SAY_TOOL_SCHEMA]  # none declared: lerobot's default
    tools[0]["function"]["name"] = "changed"
    assert LeRobotDataset(root=av1_root).meta.tools == [SAY_TOOL_SCHEMA]  # a deep copy each time
    assert SAY_TOOL_SCHEMA["function"]["name"] == "say"


def test_tools_that_are_not_function_schemas_are_an_error_naming_info_json(language_root, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(language_root, root)
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "tools": "say"}))
    with pytest.raises(DatasetFormatError, match=r"meta/info.json: 'tools' must be a list of function schemas"):
        LeRobotDataset(root=root).meta.tools


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_batches_hold_a_list_of_each_samples_rows(language_root, workers):
    dataset = StreamingLeRobotDataset(root=language_root, return_uint8=True)
    fast = list(StreamingDataLoader(dataset, batch_size=5, num_workers=workers))
    reference = list(StreamingDataLoader(dataset, batch_size=5, num_workers=workers, collate_fn=collate_samples))
    assert_same_batches(fast, reference)
    by_index = {int(s["index"]): s for s in LeRobotDataset(root=language_root)}
    for batch in fast:
        for key in LANGUAGE:
            assert batch[key] == [by_index[int(i)][key] for i in batch["index"]]


def test_per_sample_loader_path_keeps_lists(language_root):
    """With image_transforms the loader collates samples itself: language columns stay lists there too."""
    dataset = StreamingLeRobotDataset(root=language_root, image_transforms=lambda frames: frames)
    batch = next(iter(StreamingDataLoader(dataset, batch_size=3, num_workers=1)))
    assert isinstance(batch[LANGUAGE_PERSISTENT], list) and len(batch[LANGUAGE_PERSISTENT]) == 3
    assert all(isinstance(cell, list) for cell in batch[LANGUAGE_EVENTS])


def test_a_batch_where_only_some_samples_carry_a_language_key_is_refused():
    samples = [{"index": torch.tensor(0), LANGUAGE_EVENTS: []}, {"index": torch.tensor(1)}]
    with pytest.raises(ValueError, match="1/2 samples carry 'language_events'"):
        collate_samples(samples)


def test_a_window_on_a_language_column_is_refused(language_root):
    deltas = {LANGUAGE_EVENTS: [-0.05, 0.0]}
    with pytest.raises(ValueError, match=r"delta_timestamps\['language_events'\].*language column"):
        LeRobotDataset(root=language_root, delta_timestamps=deltas)
    with pytest.raises(ValueError, match=r"delta_timestamps\['language_events'\].*language column"):
        StreamingLeRobotDataset(root=language_root, delta_timestamps=deltas)


def test_mixture_strict_needs_the_same_language_keys(language_root, av1_root):
    with pytest.raises(ValueError, match="'language_persistent' is in source"):
        StreamingLeRobotDataset(mixture=Mixture(sources=[Source(root=language_root), Source(root=av1_root)]))


@pytest.mark.parametrize("workers", [0, 2])
def test_mixture_union_gives_empty_rows_and_a_pad_flag_where_a_source_has_none(language_root, av1_root, workers):
    kwargs = dict(
        mixture=Mixture(sources=[Source(root=language_root), Source(root=av1_root)], features="union"),
        seed=2,
        return_uint8=True,
    )
    samples = list(StreamingLeRobotDataset(**kwargs))
    plain = {int(s["index"]): s for s in LeRobotDataset(root=language_root)}
    for sample in samples:
        lacking = int(sample["dataset_index"]) == 1
        for key in LANGUAGE:
            assert bool(sample[f"{key}_is_pad"]) is lacking
            assert sample[key] == ([] if lacking else plain[int(sample["index"])][key])
    assert samples[0][LANGUAGE_EVENTS] is not samples[1][LANGUAGE_EVENTS]  # fresh lists, never one shared
    fast = list(StreamingDataLoader(StreamingLeRobotDataset(**kwargs), batch_size=6, num_workers=workers))
    reference = list(
        StreamingDataLoader(
            StreamingLeRobotDataset(**kwargs), batch_size=6, num_workers=workers, collate_fn=collate_samples
        )
    )
    assert_same_batches(fast, reference)
    assert any(batch[LANGUAGE_EVENTS_PAD].any() and not batch[LANGUAGE_EVENTS_PAD].all() for batch in fast)


LANGUAGE_EVENTS_PAD = f"{LANGUAGE_EVENTS}_is_pad"


def _replace_cells(root: Path, key: str, cells: pa.Array, episode: int) -> Path:
    """Rewrite the data file holding `episode` with column `key` replaced by `cells` on that episode's rows."""
    dataset = LeRobotDataset(root=root)
    path = root / dataset.meta.data_file(episode)
    table = pq.read_table(path)
    rows = np.flatnonzero(table.column("episode_index").to_numpy() == episode)
    values = table.column(key).to_pylist()
    for row, cell in zip(rows.tolist(), cells.to_pylist()):
        values[row] = cell
    column = pa.array(values, type=cells.type)
    pq.write_table(table.set_column(table.schema.get_field_index(key), key, column), path)
    return path


@pytest.mark.parametrize("reader", ["map-style", "streaming"])
def test_a_cell_that_is_not_a_list_of_structs_names_file_key_episode_and_frame(language_root, tmp_path, reader):
    root = tmp_path / "ds"
    shutil.copytree(language_root, root)
    length = int(LeRobotDataset(root=root).meta.episodes.length[2])
    cells = pa.array([["free text"] if frame == 3 else [] for frame in range(length)], type=pa.list_(pa.string()))
    path = _replace_cells(root, LANGUAGE_EVENTS, cells, 2)
    first = int(LeRobotDataset(root=root).meta.episodes.from_index[2])
    pattern = rf"{path.name}.*episode 2: column 'language_events' is list<\w+: string>, not a list of structs"
    with pytest.raises(DatasetFormatError, match=pattern):
        if reader == "map-style":
            LeRobotDataset(root=root)[first]
        else:
            list(StreamingLeRobotDataset(root=root, episodes=[2]))


def test_a_null_cell_names_its_frame(language_root, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(language_root, root)
    dataset = LeRobotDataset(root=root)
    length = int(dataset.meta.episodes.length[1])
    kind = language_arrow_type(LANGUAGE_EVENTS, pa.string())  # pyarrow builds no JSON values from Python
    _replace_cells(root, LANGUAGE_EVENTS, pa.array([None if f == 5 else [] for f in range(length)], type=kind), 1)
    with pytest.raises(DatasetFormatError, match="episode 1, frame 5: column 'language_events' is null"):
        list(StreamingLeRobotDataset(root=root, episodes=[1]))


def test_stats_skip_language_columns(language_root):
    assert not set(LANGUAGE) & set(LeRobotDataset(root=language_root).meta.stats)
