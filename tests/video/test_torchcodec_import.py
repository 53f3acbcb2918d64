"""torchcodec's import (once per process, ~300k objects) runs with the cyclic garbage collector paused, and the
collector's state is what it was before: on stays on, off stays off. Paused, the import itself runs no pass (with
the collector on it ran hundreds, full ones among them); its re-enabling may lead to one, after it. And imported
after a process group exists, it leaves that group for destroy_process_group to free."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from robostream.video.decoder import torchcodec_available
from tests.helpers import fail_unless_ranks, run_torchrun

FRESH = """
import gc
import torch
from robostream.video.decoder import torchcodec_available
passes = []
gc.callbacks.append(lambda phase, info: passes.append(info["generation"]) if phase == "stop" else None)
assert torchcodec_available()
gc.callbacks.clear()
print(len(passes), gc.isenabled())
"""


def test_the_import_runs_no_collection_and_leaves_the_collector_on():
    out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=120, check=True)
    passes, enabled = out.stdout.split()
    assert int(passes) <= 1 and enabled == "True", out.stdout + out.stderr


def test_a_collector_turned_off_stays_off():
    gc.disable()
    try:
        assert torchcodec_available.__wrapped__()
        assert not gc.isenabled()
    finally:
        gc.enable()


# A training script's order: robostream imported, the process group made, a dataset built (torchcodec's import).
AFTER_INIT = """
import json, os, sys
import torch.distributed as dist
from robostream import StreamingLeRobotDataset
dist.init_process_group("gloo")
from robostream.video.decoder import torchcodec_available
assert torchcodec_available()
dist.barrier()
dist.destroy_process_group()
threads = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as fh:
    json.dump({"rank": int(os.environ["RANK"]), "gloo_threads": [t for t in threads if "gloo" in t]}, fh)
"""


def test_a_group_made_before_the_import_is_freed_by_destroy_process_group(tmp_path):
    """torchcodec's import brings in torch.distributed.nn, whose functions' defaults bind the process group
    existing at that import: then destroy_process_group frees nothing, the group's gloo threads run on into the
    interpreter's exit and sometimes abort the process there (a two-rank bench run, ~1 in 40)."""
    script = tmp_path / "after_init.py"
    script.write_text(AFTER_INIT)
    proc = run_torchrun(["--nproc_per_node", "2", str(script), str(tmp_path)], timeout=240)
    reports = [json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")]
    fail_unless_ranks(proc, len(reports), 2, "their threads")
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["gloo_threads"] == [] for r in reports), reports
