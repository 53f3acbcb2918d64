"""Run by tests/datasets/test_distributed.py under `torchrun --nproc_per_node 2` (gloo, CPU).

Each rank reads a full epoch through 2 DataLoader worker processes with an all_reduce per step (it would hang if
ranks had different batch counts), then reads 3 batches of the next epoch and saves the resume state.
"""

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions


def main(root: str, out: str, episodes: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    Path(out, f"started-{rank}").write_text(str(world))
    dataset = StreamingLeRobotDataset(
        root=root, episodes=json.loads(episodes), seed=4, streams=StreamOptions(uneven="drop"), return_uint8=True
    )  # rank and world size come from torch.distributed
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2)
    epoch_ids, steps = [], 0
    for batch in loader:
        epoch_ids += batch["index"].tolist()
        step = torch.tensor([1])
        dist.all_reduce(step)  # every rank must take part in every step
        assert int(step) == world
        steps += 1
    dataset.set_epoch(1)
    head = []
    for i, batch in enumerate(loader):
        head += batch["index"].tolist()
        if i == 2:
            break
    state = loader.state_dict()
    Path(out, f"rank-{rank}.json").write_text(
        json.dumps(
            {"rank": rank, "world": world, "steps": steps, "epoch0": epoch_ids, "epoch1_head": head, "state": state}
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
