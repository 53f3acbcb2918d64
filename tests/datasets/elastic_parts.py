"""One part of an epoch on a (ranks x workers) layout: as a real torchrun job (tests/datasets/torchrun_elastic.py),
or in this process with one loader per simulated rank (`rank=`/`world_size=`, real DataLoader workers). Both give
per rank the samples read, the step count and the loader's state after its last batch."""

import itertools
import json
from pathlib import Path

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from tests.helpers import fail_unless_ranks, run_torchrun

ELASTIC = Path(__file__).with_name("torchrun_elastic.py")
BATCH_SIZE = 3  # torchrun_elastic.py's


def torchrun_part(root, out: Path, ranks: int, workers: int, batches: int, state_file) -> list[dict]:
    """`ranks` processes x `workers` DataLoader workers read `batches` batches (-1: to the end) of `root` (a folder,
    or a mixture's .json spec), from `state_file` ("-": a fresh epoch); one result dict per rank."""
    out.mkdir(parents=True)
    proc = run_torchrun(
        [
            "--nproc_per_node",
            str(ranks),
            str(ELASTIC),
            str(root),
            str(out),
            str(workers),
            str(batches),
            str(state_file),
        ],
        timeout=420,
    )
    fail_unless_ranks(proc, len(list(out.glob("rank-*.json"))), ranks, "their results")
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(ranks)]


def in_process_part(root: Path, ranks: int, workers: int, batches: int, state: dict | None) -> list[dict]:
    """The same part of a dataset folder as `torchrun_part` (same dataset arguments), each rank a loader in this process told its
    `rank`/`world_size`, read one after the other: the plan decides every rank's samples from (seed, epoch, layout)
    alone, so ranks need no process of their own to read what they would read under torchrun."""
    results = []
    for rank in range(ranks):
        dataset = StreamingLeRobotDataset(
            root=root,
            seed=7,
            streams=StreamOptions(pool_size=2, uneven="pad"),
            return_uint8=True,
            rank=rank,
            world_size=ranks,
        )
        loader = StreamingDataLoader(dataset, batch_size=BATCH_SIZE, num_workers=workers)
        if state is not None:
            loader.load_state_dict(state)
        ids, steps = [], 0
        for batch in itertools.islice(loader, None if batches < 0 else batches):
            ids += batch["index"].tolist()
            steps += 1
        results.append({"ids": ids, "steps": steps, "state": loader.state_dict()})
    return results
