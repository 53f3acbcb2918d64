"""Run by tests/datasets/test_distributed.py under `torchrun --nproc_per_node N` (gloo, CPU): one part of an epoch.

argv: root (or a .json file: a mixture, {"sources": [Source kwargs], "epoch_size": ...}), out folder, workers per
rank, batches (-1: to the end of the epoch), resume state file or "-". A mixture spec may ask for
"batching": "per_stream" or "stratified" (planned for the loader's batch size, 3).
Every step does an all_reduce (it would hang if ranks had different batch counts). Each rank writes the samples it
read (`index`; a mixture: [dataset_index, index]), its step count and the loader's state after its last batch.
"""

import itertools
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from robostream import Mixture, Source, StreamingDataLoader, StreamingLeRobotDataset, StreamOptions


def main(root: str, out: str, workers: str, batches: str, state: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if root.endswith(".json"):
        spec = json.loads(Path(root).read_text())
        lanes = (
            {"batching": spec["batching"], "batch_size": 3}
            if spec.get("batching") in ("per_stream", "stratified")
            else {}
        )
        sources = [Source(**source) for source in spec["sources"]]
        where = {"mixture": Mixture(sources=sources, epoch_size=spec.get("epoch_size"), **lanes)}
    else:
        where = {"root": root}
    dataset = StreamingLeRobotDataset(
        **where, seed=7, streams=StreamOptions(pool_size=2, uneven="pad"), return_uint8=True
    )
    loader = StreamingDataLoader(dataset, batch_size=3, num_workers=int(workers))
    if state != "-":
        loader.load_state_dict(json.loads(Path(state).read_text()))
    ids, steps, batch_sources = [], 0, []
    for batch in itertools.islice(loader, None if int(batches) < 0 else int(batches)):
        ids += (
            batch["index"].tolist()
            if "dataset_index" not in batch
            else list(zip(batch["dataset_index"].tolist(), batch["index"].tolist()))
        )
        if "dataset_index" in batch:
            batch_sources.append(sorted(set(batch["dataset_index"].tolist())))
        step = torch.tensor([1])
        dist.all_reduce(step)
        assert int(step) == world
        steps += 1
    Path(out, f"rank-{rank}.json").write_text(
        json.dumps({"ids": ids, "steps": steps, "batch_sources": batch_sources, "state": loader.state_dict()})
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:6])
