#!/usr/bin/env python
"""Load a local LeRobot dataset with the real `lerobot` package and dump samples to .npz (reference side of tests/compat).

Runs under an interpreter that has `lerobot` installed (NOT robostream's venv); self-contained, imports nothing from
robostream. It never touches the network: HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1 are forced and HF_HOME is set to
--hf-home (default: $HF_HOME if set, else a fresh temporary directory) before lerobot / huggingface_hub are imported.

Usage, one configuration:
    python lerobot_dump.py ROOT OUT.npz [--hf-home DIR] [--delta-json JSON] [--episodes 0,2] [--indices 0,5,17]
                           [--tolerance 1e-4] [--video-backend torchcodec|pyav] [--return-uint8]
Several configurations in one process (lerobot's import and dataset load are paid once per process):
    python lerobot_dump.py ROOT OUT.npz --spec-json '[{"name": "a", "delta": {...}, "episodes": [..], "indices": [..]}, ...]'

npz layout (per configuration NAME; "main" for the single-configuration form):
    "NAME/{pos}/{key}" -> np.ndarray (tensor -> numpy, str -> numpy unicode scalar)
    "NAME/__len__"     -> int64 len(dataset);   "NAME/__positions__" -> int64 positions dumped
    "__meta__"         -> json string {NAME: {len, num_episodes, video_backend, lerobot_version, listing, ...}}
A json summary of the same meta is printed to stdout. Positions default to 0, len//2, len-1.
"""

import argparse
import json
import sys

from lerobot_offline import setup_offline_env


def _to_numpy(v):
    import numpy as np
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if isinstance(v, str):
        return np.array(v)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v):
        return np.array(v)
    return np.asarray(v)


def dump_one(root, spec, tolerance, video_backend, return_uint8, arrays):
    import lerobot
    import numpy as np
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    name = spec.get("name", "main")
    kw = {}
    if video_backend:
        kw["video_backend"] = video_backend
    if return_uint8:
        kw["return_uint8"] = True
    ds = LeRobotDataset(
        repo_id="local/test",
        root=root,
        delta_timestamps=spec.get("delta"),
        episodes=spec.get("episodes"),
        tolerance_s=tolerance,
        **kw,
    )
    n = len(ds)
    positions = spec.get("indices") or sorted({0, n // 2, n - 1})
    listing = {}
    for pos in positions:
        item = ds[pos]
        listing[pos] = {}
        for k, v in item.items():
            a = _to_numpy(v)
            arrays[f"{name}/{pos}/{k}"] = a
            listing[pos][k] = {
                "type": type(v).__name__,
                "dtype": str(v.dtype) if isinstance(v, torch.Tensor) else str(a.dtype),
                "shape": list(a.shape),
            }
    arrays[f"{name}/__len__"] = np.array(n, dtype=np.int64)
    arrays[f"{name}/__positions__"] = np.array(positions, dtype=np.int64)
    return {
        "len": n,
        "num_episodes": ds.num_episodes,
        "video_backend": getattr(ds, "_video_backend", None) or getattr(ds, "video_backend", None),
        "lerobot_version": getattr(lerobot, "__version__", None),
        "delta_timestamps": spec.get("delta"),
        "episodes": spec.get("episodes"),
        "positions": positions,
        "listing": listing,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--hf-home", default=None, help="HF_HOME for this run (default: $HF_HOME, else a temp dir)")
    ap.add_argument("--spec-json", default=None, help="json list of {name, delta, episodes, indices}")
    ap.add_argument("--delta-json", default=None)
    ap.add_argument("--indices", default=None, help="comma-separated dataset positions")
    ap.add_argument("--episodes", default=None, help="comma-separated episode indices")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--video-backend", default=None)
    ap.add_argument("--return-uint8", action="store_true")
    args = ap.parse_args(argv)

    setup_offline_env(args.hf_home)
    import numpy as np

    if args.spec_json:
        specs = json.loads(args.spec_json)
    else:
        specs = [
            {
                "name": "main",
                "delta": json.loads(args.delta_json) if args.delta_json else None,
                "episodes": [int(x) for x in args.episodes.split(",")] if args.episodes else None,
                "indices": [int(x) for x in args.indices.split(",")] if args.indices else None,
            }
        ]
    arrays, meta = {}, {}
    for spec in specs:
        meta[spec.get("name", "main")] = dump_one(
            args.root, spec, args.tolerance, args.video_backend, args.return_uint8, arrays
        )
    arrays["__meta__"] = np.array(json.dumps(meta))
    np.savez(args.out, **arrays)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
