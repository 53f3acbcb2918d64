#!/usr/bin/env python
"""Add language columns to a lerobot-written dataset as `lerobot-annotate` does, then dump what lerobot reads
(reference side of tests/compat/test_language_compat.py).

Runs under the interpreter that has `lerobot` (offline, HF_HOME from --hf-home). The columns are written by
lerobot's own annotation pieces: each episode's module rows staged with `EpisodeStaging`, the data files rewritten
by `LanguageColumnsWriter`, info.json completed by the executor's `_ensure_annotation_metadata_in_info` (language
features, the `say` tool). The rows cover every style lerobot knows of, a persistent row at a time that is no frame's
(float32 rounding) and a tool call with a float argument (the Json feature's 10 significant digits).

Usage:
    python lerobot_language.py ROOT OUT.json [--hf-home DIR] [--annotate] [--robostream]
OUT.json: {"tools": meta.tools, "samples": {index: {language key: value}}, "collate": {...}}. With --robostream
(robostream importable, e.g. PYTHONPATH=<repo>), lerobot's `lerobot_collate_fn` also collates robostream's
map-style samples, and "collate" says whether its batches equal those of lerobot's own samples.
"""

import argparse
import json
import sys
from pathlib import Path

from lerobot_offline import setup_offline_env

BATCH = 6


def staged_rows(timestamps, camera):
    """Per annotation module, one episode's rows (as the modules stage them: timestamps on frames, except the
    memory row)."""
    from lerobot.annotations.steerable_pipeline.writer import speech_atom

    n = len(timestamps)
    speech = speech_atom(timestamps[n // 3], "slowing down")
    speech["tool_calls"][0]["function"]["arguments"]["speed"] = 0.1234567890123
    return {
        "plan": [
            {"role": "assistant", "content": "1. reach 2. grasp", "style": "plan", "timestamp": timestamps[0]},
            {"role": "assistant", "content": "reach", "style": "subtask", "timestamp": timestamps[0]},
            {"role": "assistant", "content": "grasp", "style": "subtask", "timestamp": timestamps[n // 2]},
            {"role": "assistant", "content": "the cube is red", "style": "memory", "timestamp": 0.123456789},
            {"role": "assistant", "content": "move left", "style": "motion", "timestamp": timestamps[1]},
            {"role": "user", "content": "pick it up", "style": "task_aug", "timestamp": timestamps[0]},
        ],
        "interjections": [
            {"role": "user", "content": "slower please", "style": "interjection", "timestamp": timestamps[n // 3]},
            speech,
        ],
        "vqa": [
            {
                "role": "user",
                "content": "where is the cube?",
                "style": "vqa",
                "camera": camera,
                "timestamp": timestamps[2 * n // 3],
            },
            {
                "role": "assistant",
                "content": '{"x": 3, "y": 0.5}',
                "style": "vqa",
                "camera": camera,
                "timestamp": timestamps[2 * n // 3],
            },
            {
                "role": "assistant",
                "content": "[[1, 2], [3, 4]]",
                "style": "trace",
                "camera": camera,
                "timestamp": timestamps[n - 1],
            },
        ],
    }


def annotate(root, staging):
    from lerobot.annotations.steerable_pipeline.executor import Executor
    from lerobot.annotations.steerable_pipeline.reader import iter_episodes
    from lerobot.annotations.steerable_pipeline.staging import EpisodeStaging
    from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter
    from lerobot.datasets.io_utils import load_info

    camera = next(k for k, f in load_info(root).features.items() if f["dtype"] == "video")
    records = list(iter_episodes(root))
    for record in records:
        stage = EpisodeStaging(staging, record.episode_index)
        for module, rows in staged_rows(record.frame_timestamps, camera).items():
            stage.write(module, rows)
    LanguageColumnsWriter().write_all(records, staging, root)
    Executor._ensure_annotation_metadata_in_info(root)


def collate_compare(lerobot_samples, robostream_samples):
    """lerobot_collate_fn over both packages' samples: the keys it keeps and whether the batches are equal."""
    import torch
    from lerobot.utils.collate import lerobot_collate_fn

    ours, theirs = lerobot_collate_fn(robostream_samples), lerobot_collate_fn(lerobot_samples)
    equal = sorted(ours) == sorted(theirs) and all(
        torch.equal(ours[k], theirs[k]) if isinstance(theirs[k], torch.Tensor) else ours[k] == theirs[k] for k in theirs
    )
    return {"keys": list(theirs), "robostream_keys": list(ours), "equal": equal}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--hf-home", default=None)
    ap.add_argument("--annotate", action="store_true", help="add the language columns first")
    ap.add_argument("--robostream", action="store_true", help="collate robostream's samples with lerobot's collate")
    args = ap.parse_args(argv)
    setup_offline_env(args.hf_home)
    from lerobot.datasets.language import LANGUAGE_COLUMNS
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(args.root)
    if args.annotate:
        annotate(root, Path(args.out).with_suffix(".staging"))
    dataset = LeRobotDataset("local/test", root=root)
    samples = [dataset[i] for i in range(len(dataset))]
    out = {
        "tools": dataset.meta.tools,
        "samples": {int(s["index"]): {k: s[k] for k in LANGUAGE_COLUMNS} for s in samples},
    }
    if args.robostream:
        from robostream.datasets.map_style import LeRobotDataset as RobostreamDataset

        ours = RobostreamDataset(root=root)
        out["collate"] = collate_compare(samples[:BATCH], [ours[i] for i in range(BATCH)])
    Path(args.out).write_text(json.dumps(out))
    print(json.dumps({"samples": len(samples), "collate": out.get("collate")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
