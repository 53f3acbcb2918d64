"""Real multi-process runs: `torchrun --nproc_per_node 2` with the gloo backend and DataLoader workers."""

import itertools
import json
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.format.metadata import load_metadata
from tests.datasets.elastic_parts import in_process_part
from tests.helpers import dataset_indices, fail_unless_ranks, run_torchrun

SCRIPT = Path(__file__).with_name("torchrun_epoch.py")


@pytest.fixture(scope="module")
def episodes(av1_root):
    """An episode subset whose frame count divides into the 12 canonical streams of 4 consumers, so the split
    needs neither padding nor dropping and the epoch must come out complete and disjoint."""
    lengths = load_metadata(av1_root).episodes.length.tolist()
    for size in range(len(lengths), 0, -1):
        for subset in itertools.combinations(range(len(lengths)), size):
            if sum(lengths[e] for e in subset) % 12 == 0:
                return list(subset)
    pytest.fail("no episode subset with a frame count divisible by 12")


@pytest.fixture(scope="module")
def torchrun_results(av1_root, episodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    proc = run_torchrun(
        ["--nproc_per_node", "2", str(SCRIPT), str(av1_root), str(out), json.dumps(episodes)], timeout=420
    )
    fail_unless_ranks(proc, len(list(out.glob("rank-*.json"))), 2, "their results")
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


def test_two_ranks_split_the_epoch_disjointly_with_equal_counts(torchrun_results, av1_root, episodes):
    r0, r1 = torchrun_results
    assert (r0["world"], r1["world"]) == (2, 2)
    assert r0["steps"] == r1["steps"] and len(r0["epoch0"]) == len(r1["epoch0"])
    union = r0["epoch0"] + r1["epoch0"]
    assert len(union) == len(set(union)), "ranks overlap"
    assert sorted(union) == dataset_indices(av1_root, episodes), "the union over ranks is not the whole epoch"


def test_resume_from_two_ranks_on_one_rank_with_three_workers(torchrun_results, av1_root, episodes):
    r0, r1 = torchrun_results
    assert r0["state"] == r1["state"]
    dataset = StreamingLeRobotDataset(
        root=av1_root,
        episodes=episodes,
        seed=4,
        streams=StreamOptions(uneven="drop"),
        return_uint8=True,
        rank=0,
        world_size=1,
    )
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=3)
    loader.load_state_dict(r0["state"])
    rest = [i for batch in loader for i in batch["index"].tolist()]
    seen = r0["epoch1_head"] + r1["epoch1_head"] + rest
    assert len(seen) == len(set(seen)), "a sample was repeated after the resume"
    assert sorted(seen) == dataset_indices(av1_root, episodes), "a sample was skipped after the resume"


def test_env_rank_and_world_size_are_honoured(av1_root, monkeypatch):
    counts = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        dataset = StreamingLeRobotDataset(root=av1_root, streams=StreamOptions(uneven="drop"))
        counts.append([i for b in DataLoader(dataset, batch_size=8) for i in b["index"].tolist()])
    assert len(counts[0]) == len(counts[1]) and not set(counts[0]) & set(counts[1])


@pytest.mark.parametrize(
    "before,after", [((2, 2), (3, 1)), ((2, 2), (5, 1)), ((2, 6), (1, 7))], ids=["4to3", "4to5", "12to7"]
)
def test_elastic_resume_on_any_layout(av1_root, before, after):
    """(ranks, workers) before -> after, each rank a loader in this process (elastic_parts.in_process_part; the
    mixture's test runs each batching mode as real torchrun jobs, plan/ proves the arithmetic on every layout): the
    new layout (whose consumer count need not divide the canonical count) continues the epoch with no sample skipped
    or read twice, every rank taking the same number of steps (padding repeats at most one sample per consumer)."""
    head = in_process_part(av1_root, *before, batches=4, state=None)
    assert all(r["state"] == head[0]["state"] for r in head)  # any rank's state describes the whole job
    tail = in_process_part(av1_root, *after, batches=-1, state=json.loads(json.dumps(head[0]["state"])))
    assert len({r["steps"] for r in tail}) == 1, "ranks took different numbers of steps"
    done = [i for r in head for i in r["ids"]]
    rest = [i for r in tail for i in r["ids"]]
    assert len(done) == len(set(done)) and not set(done) & set(rest), "a sample was read twice"
    assert sorted(set(done) | set(rest)) == dataset_indices(av1_root), "a sample was skipped"
    assert len(rest) - len(set(rest)) <= after[0] * after[1]
