"""Opt-in: language columns as lerobot 0.6.1 writes (lerobot-annotate's own writer) and reads them.

lerobot writes a dataset (lerobot_make_dataset.py, several data files), lerobot_language.py adds the language
columns with lerobot-annotate's writer pieces and dumps what lerobot's LeRobotDataset returns for them at every
position. robostream's map-style samples, streaming samples, whole loader batches, a 2-source mixture and the same
dataset over a slow HTTP store must carry exactly those values (dict key order included), and its metadata the same
`tools`; lerobot reads a `robostream synth --language` dataset as robostream does. In lerobot's interpreter,
lerobot's own `lerobot_collate_fn` collates robostream's samples as it collates its own (it drops the language
columns: lerobot 0.6.1 keeps only rendered `messages`; robostream's loader keeps them, see datasets/collate.py).

Enable with ROBOSTREAM_LEROBOT_PYTHON (see test_lerobot_compat.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robostream import LeRobotDataset, Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset
from tests.compat.test_lerobot_compat import HERE, _run_lerobot
from tests.lerobot_env import run

LANGUAGE = ("language_persistent", "language_events")


@pytest.fixture(scope="module")
def annotated(lerobot_python: str, hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("lerobot_language")
    root = tmp / "ds"
    _run_lerobot(
        lerobot_python,
        hf_home,
        "lerobot_make_dataset.py",
        str(root),
        "--episodes",
        "4",
        "--cameras",
        "1",
        "--size",
        "32x32",
        "--data-mb",
        "0.004",
    )
    out = tmp / "language.json"
    run(
        lerobot_python,
        hf_home,
        [
            str(HERE / "lerobot_language.py"),
            str(root),
            str(out),
            "--annotate",
            "--robostream",
            "--hf-home",
            str(hf_home),
        ],
        PYTHONPATH=f"{HERE}:{HERE.parents[1]}",
    )
    reference = json.loads(out.read_text())
    return {
        "root": root,
        "tools": reference["tools"],
        "collate": reference["collate"],
        "samples": {int(i): values for i, values in reference["samples"].items()},
    }


def assert_like_lerobot(sample: dict, reference: dict) -> None:
    expected = reference["samples"][int(sample["index"])]
    for key in LANGUAGE:
        assert sample[key] == expected[key], (int(sample["index"]), key)
        assert [list(row) for row in sample[key]] == [list(row) for row in expected[key]]  # field order


def test_language_map_style_samples_equal_lerobots(annotated):
    dataset = LeRobotDataset(root=annotated["root"])
    assert len(list((annotated["root"] / "data").glob("chunk-*/file-*.parquet"))) >= 2
    assert len(dataset) == len(annotated["samples"])
    assert sum(bool(annotated["samples"][i]["language_events"]) for i in annotated["samples"]) >= 3 * 4
    for i in range(len(dataset)):
        assert_like_lerobot(dataset[i], annotated)
    assert dataset.meta.tools == annotated["tools"]


def test_language_streaming_samples_and_mixture_equal_lerobots(annotated):
    seen = [s for s in StreamingLeRobotDataset(root=annotated["root"], shuffle=False)]
    assert sorted(int(s["index"]) for s in seen) == sorted(annotated["samples"])
    for sample in seen:
        assert_like_lerobot(sample, annotated)
    mixture = StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=annotated["root"]), Source(root=annotated["root"])]), seed=1
    )
    for sample in mixture:
        assert_like_lerobot(sample, annotated)


@pytest.mark.parametrize("workers", [0, 2])
def test_language_loader_batches_hold_lerobots_values(annotated, workers):
    dataset = StreamingLeRobotDataset(root=annotated["root"], return_uint8=True)
    batches = list(StreamingDataLoader(dataset, batch_size=8, num_workers=workers))
    assert sum(len(b["index"]) for b in batches) == len(annotated["samples"])
    for batch in batches:
        for key in LANGUAGE:
            assert batch[key] == [annotated["samples"][int(i)][key] for i in batch["index"]], key


def test_language_over_a_slow_store_equals_lerobots(annotated, monkeypatch):
    """The same dataset read over HTTP ranges from a store with latency and a cap on requests in flight."""
    from tests.remote.servers import RangeHTTPServer

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with RangeHTTPServer(annotated["root"], latency_s=0.01, max_in_flight=3) as store:
        streamed = list(StreamingLeRobotDataset(root=store.url, seed=2, return_uint8=True))
        mapped = LeRobotDataset(root=store.url, return_uint8=True)
        for position in (0, len(mapped) // 2, len(mapped) - 1):
            assert_like_lerobot(mapped[position], annotated)
        assert mapped.meta.tools == annotated["tools"]
    assert sorted(int(s["index"]) for s in streamed) == sorted(annotated["samples"])
    for sample in streamed:
        assert_like_lerobot(sample, annotated)


def test_language_lerobots_collate_takes_robostreams_samples(annotated):
    collate = annotated["collate"]
    assert collate["equal"], collate
    assert not set(LANGUAGE) & set(collate["keys"])  # lerobot 0.6.1's collate drops the language columns


def test_language_synth_dataset_reads_in_lerobot_identically(lerobot_python: str, hf_home: Path, tmp_path: Path):
    """`robostream synth --language` writes lerobot's struct schema (JSON tool calls): lerobot reads the same rows."""
    from robostream.synth import SynthConfig, generate

    root = generate(
        tmp_path / "ds",
        SynthConfig(episodes=3, cameras=1, height=48, width=64, episode_length=12, state_dim=2, language=True),
        jobs=1,
    )
    out = tmp_path / "language.json"
    run(lerobot_python, hf_home, [str(HERE / "lerobot_language.py"), str(root), str(out), "--hf-home", str(hf_home)])
    reference = json.loads(out.read_text())
    reference["samples"] = {int(i): values for i, values in reference["samples"].items()}
    dataset = LeRobotDataset(root=root)
    assert len(dataset) == len(reference["samples"])
    for i in range(len(dataset)):
        assert_like_lerobot(dataset[i], reference)
    assert dataset.meta.tools == reference["tools"]
