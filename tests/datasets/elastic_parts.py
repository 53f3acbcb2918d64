"""Runs one part of an epoch as a real torchrun job (tests/datasets/torchrun_elastic.py) and reads its results."""

import json
from pathlib import Path

from tests.helpers import fail_unless_ranks, run_torchrun

ELASTIC = Path(__file__).with_name("torchrun_elastic.py")


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
