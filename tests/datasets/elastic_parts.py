"""Runs one part of an epoch as a real torchrun job (tests/datasets/torchrun_elastic.py) and reads its results."""

import json
import os
import subprocess
import sys
from pathlib import Path

ELASTIC = Path(__file__).with_name("torchrun_elastic.py")


def torchrun_part(root, out: Path, ranks: int, workers: int, batches: int, state_file) -> list[dict]:
    """`ranks` processes x `workers` DataLoader workers read `batches` batches (-1: to the end) of `root` (a folder,
    or a mixture's .json spec), from `state_file` ("-": a fresh epoch); one result dict per rank."""
    out.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
           str(ELASTIC), str(root), str(out), str(workers), str(batches), str(state_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(ranks)]
