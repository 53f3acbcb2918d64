#!/usr/bin/env python
"""Convert a local LeRobot v2.1 dataset to v3.0 IN PLACE with the real `lerobot` converter (reference side of
tests/compat/test_convert_compat.py and of benchmarks/convert_bench.py).

Runs under an interpreter that has `lerobot` installed (NOT robostream's venv); self-contained, imports nothing from
robostream. It never touches the network: HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1 are forced and HF_HOME is set to
--hf-home (default: $HF_HOME if set, else a fresh temporary directory) before lerobot / huggingface_hub are imported.

Usage:
    python lerobot_convert.py ROOT [--hf-home DIR] [--data-mb 100] [--video-mb 200]

lerobot's `convert_dataset(root=ROOT, push_to_hub=False)`: ROOT becomes the v3.0 dataset and the v2.1 input is
moved to ROOT_old (ROOT_v30 is used while converting). The sizes are passed as floats to `convert_dataset` (its
command line only takes integers). Prints a json line {"root", "seconds", "lerobot_version"} to stdout.
"""

import argparse
import json
import os
import sys
import time

from lerobot_offline import setup_offline_env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="the v2.1 dataset folder, converted in place")
    ap.add_argument("--hf-home", default=None, help="HF_HOME for this run (default: $HF_HOME, else a temp dir)")
    ap.add_argument("--data-mb", type=float, default=100.0, help="data_file_size_in_mb")
    ap.add_argument("--video-mb", type=float, default=200.0, help="video_file_size_in_mb")
    args = ap.parse_args(argv)

    setup_offline_env(args.hf_home)
    import lerobot
    from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset

    root = os.path.abspath(args.root)
    start = time.perf_counter()
    convert_dataset(
        repo_id="local/ds",
        root=root,
        push_to_hub=False,
        data_file_size_in_mb=args.data_mb,
        video_file_size_in_mb=args.video_mb,
    )
    print(
        json.dumps(
            {
                "root": root,
                "seconds": time.perf_counter() - start,
                "lerobot_version": getattr(lerobot, "__version__", None),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
