"""torchcodec's import (once per process, ~300k objects) runs with the cyclic garbage collector paused, and the
collector's state is what it was before: on stays on, off stays off. Paused, the import itself runs no pass (with
the collector on it ran hundreds, full ones among them); its re-enabling may lead to one, after it."""

from __future__ import annotations

import gc
import subprocess
import sys

from robostream.video.decoder import torchcodec_available

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
