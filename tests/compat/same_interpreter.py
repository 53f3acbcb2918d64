"""Run under the lerobot interpreter with robostream importable: lerobot's and robostream's LeRobotDataset in ONE
process (one torch, one torchcodec), every position compared exactly, and the metadata lerobot's make_policy and
resolve_delta_timestamps read from `ds_meta` (features, fps, camera_keys, stats). Prints a JSON summary.

    python same_interpreter.py ROOT --delta-json JSON --hf-home DIR
"""

import argparse
import json

import numpy as np
from lerobot_offline import setup_offline_env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("--delta-json", default=None)
    ap.add_argument("--hf-home", default=None)
    args = ap.parse_args(argv)
    setup_offline_env(args.hf_home)
    import lerobot
    import torch
    import torchcodec
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Theirs

    import robostream
    from robostream import LeRobotDataset as Ours

    delta = json.loads(args.delta_json) if args.delta_json else None
    theirs = Theirs(repo_id="local/test", root=args.root, delta_timestamps=delta)
    ours = Ours(root=args.root, delta_timestamps=delta)
    mismatches = _metadata_mismatches(theirs.meta, ours.meta)
    if len(theirs) != len(ours):
        mismatches.append(f"len {len(theirs)} != {len(ours)}")
    for position in range(len(theirs)):
        a, b = theirs[position], ours[position]
        if set(a) != set(b):  # the same keys (their order in the dict is not part of the contract)
            mismatches.append(f"{position}: keys {sorted(set(a) ^ set(b))} differ")
            continue
        for key, value in a.items():
            other = b[key]
            same = (
                isinstance(value, torch.Tensor)
                and isinstance(other, torch.Tensor)
                and value.dtype == other.dtype
                and value.shape == other.shape
                and torch.equal(value, other)
            ) or (not isinstance(value, torch.Tensor) and value == other)
            if not same:
                mismatches.append(f"{position}: {key}")
    print(
        json.dumps(
            {
                "positions": len(theirs),
                "mismatches": mismatches[:20],
                "lerobot": lerobot.__version__,
                "robostream": robostream.__version__,
                "torch": torch.__version__,
                "torchcodec": torchcodec.__version__,
            }
        )
    )


def _metadata_mismatches(theirs, ours) -> list[str]:
    out = [
        f"meta.{name}" for name in ("features", "fps", "camera_keys") if getattr(theirs, name) != getattr(ours, name)
    ]
    if set(theirs.stats) != set(ours.stats):
        out.append(f"meta.stats keys {sorted(set(theirs.stats) ^ set(ours.stats))} differ")
    for key in set(theirs.stats) & set(ours.stats):
        a, b = theirs.stats[key], ours.stats[key]
        if set(a) != set(b) or any(not np.array_equal(np.asarray(a[s]), np.asarray(b[s])) for s in a):
            out.append(f"meta.stats[{key!r}]")
    return out


if __name__ == "__main__":
    main()
