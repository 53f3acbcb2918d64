"""Real multi-process runs: `torchrun --nproc_per_node 2` with the gloo backend and DataLoader workers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from robostream import LeRobotDataset, StreamingDataLoader, StreamingLeRobotDataset

SCRIPT = Path(__file__).with_name("torchrun_epoch.py")


@pytest.fixture(scope="module")
def torchrun_results(av1_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT),
           str(av1_root), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env)
    started = sorted(out.glob("started-*"))
    if len(started) < 2:
        pytest.skip(f"torchrun started {len(started)} of 2 processes, so nothing distributed ran: "
                    f"{proc.stderr[-1500:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


def test_two_ranks_split_the_epoch_disjointly_with_equal_counts(torchrun_results, av1_root):
    r0, r1 = torchrun_results
    assert (r0["world"], r1["world"]) == (2, 2)
    assert r0["steps"] == r1["steps"] and len(r0["epoch0"]) == len(r1["epoch0"])
    union = r0["epoch0"] + r1["epoch0"]
    assert len(union) == len(set(union)), "ranks overlap"
    total = len(LeRobotDataset(root=av1_root))
    # uneven="drop": the epoch is complete except the tail that keeps 4 consumers equal (< 1 sample per stream).
    assert total - len(union) < 12


def test_resume_from_two_ranks_on_one_rank_with_three_workers(torchrun_results, av1_root):
    r0, r1 = torchrun_results
    assert r0["state"] == r1["state"]
    dataset = StreamingLeRobotDataset(root=av1_root, seed=4, uneven="drop", return_uint8=True, rank=0, world_size=1)
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=3)
    loader.load_state_dict(r0["state"])
    rest = [i for batch in loader for i in batch["index"].tolist()]
    seen = r0["epoch1_head"] + r1["epoch1_head"] + rest
    assert len(seen) == len(set(seen)), "a sample was repeated after the resume"
    assert len(LeRobotDataset(root=av1_root)) - len(seen) < 12 * 2


def test_env_rank_and_world_size_are_honoured(av1_root, monkeypatch):
    counts = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        dataset = StreamingLeRobotDataset(root=av1_root, uneven="drop")
        counts.append([i for b in DataLoader(dataset, batch_size=8) for i in b["index"].tolist()])
    assert len(counts[0]) == len(counts[1]) and not set(counts[0]) & set(counts[1])
