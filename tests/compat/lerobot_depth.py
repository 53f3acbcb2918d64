#!/usr/bin/env python
"""A depth camera as lerobot 0.6.1 writes and reads it (reference side of tests/compat/test_depth_compat.py).

Runs under the interpreter that has `lerobot` (offline, HF_HOME from --hf-home); imports nothing from robostream
unless --collate asks for it.

--write: lerobot's own `LeRobotDataset.create` + `add_frame` + `save_episode` write EPISODES (odd and even
lengths, 5 episodes) at fps 10 with
  * 2 RGB cameras (libsvtav1, lerobot's default): observation.images.front (H x W) and observation.images.wrist
    (32 x 32), frames carry a gradient shifted by (episode, frame);
  * 1 depth camera observation.images.depth, float32 metres of shape (H, W, 1) with info {"is_depth_map": True}
    (how lerobot's hw_to_dataset_features marks an (H, W, 1) camera): lerobot records depth_unit "m" and writes
    HEVC gray12le lossless, log-quantised between 0.01 and 10 m. The depths sweep the whole range (so most of the
    4096 codes occur) and some pixels lie below depth_min (0, 0.004 m) or above depth_max (12, 50 m): clamped;
  * a `string` feature `note` ("e<episode>-f<frame>"), observation.state and action (float32[2]);
  * tiny file limits: several video files per camera (episodes start mid-file, on odd frames of the open-GOP HEVC
    stream too) and several data files.
--annotate: lerobot-annotate's language columns (language_persistent, language_events), added by
lerobot_language.py's `annotate` (lerobot's own EpisodeStaging + LanguageColumnsWriter).
--dump PREFIX: what lerobot's LeRobotDataset returns at EVERY position, for these configurations:
    mm          depth_output_unit "mm" (lerobot's default): every tensor of every sample
    m           depth_output_unit "m": the depth camera
    mm_window   "mm" with delta_timestamps {depth: WINDOW}: the depth camera and its _is_pad
    m_window    "m" with the same window
    uint8       "mm" with return_uint8=True: every camera
  PREFIX.npz: "<config>/<index>/<key>" -> array; "stats/<unit>/<key>/<stat>" -> meta.stats after lerobot's
  rescale_depth_stats for that unit. PREFIX.json: {"video_backend", "len", "window", "depth_key", "strings":
  {index: {key: str value (note, task)}}, "language": {index: {column: value}} (with --annotate), "dtypes":
  {config: {key: dtype}}}.
--collate OUT.json (robostream importable, e.g. PYTHONPATH=<repo>): lerobot's `lerobot_collate_fn` over
robostream's map-style samples and over lerobot's, at edge positions, in "mm" and in "m" with the window: whether
the batches are equal (lerobot_language.collate_compare); {"error": traceback} when robostream fails (the dump,
made first in the same process, stands).

Usage:
    python lerobot_depth.py ROOT [--hf-home DIR] [--write] [--size HxW] [--annotate] [--dump PREFIX]
                                 [--collate OUT.json]
"""

import argparse
import json
import sys
import traceback
from pathlib import Path

from lerobot_offline import setup_offline_env

FPS = 10
LENGTHS = [9, 12, 7, 10, 8]
DEPTH = "observation.images.depth"
RGB = ("observation.images.front", "observation.images.wrist")
WINDOW = [-0.1, 0.0, 0.1]
DEPTH_MIN, DEPTH_MAX = 0.01, 10.0  # lerobot's depth encoder defaults (metres)
COLLATE_POSITIONS = [0, 1, 8, 9, 20, 45]  # first, odd, last of episode 0, first of 1, mid-file, last


def rgb_frame(h, w, ep, fr, cam):
    """uint8 (h, w, 3): a gradient shifted by (episode, frame) over seeded noise (so the RGB files are about as
    large as the depth files, and both roll over to new files)."""
    import numpy as np

    yy, xx = np.mgrid[0:h, 0:w]
    img = np.random.default_rng(ep * 1000 + fr * 10 + cam).integers(0, 64, (h, w, 3), dtype=np.uint8)
    img[..., 0] += ((xx * 5 + fr * 9 + cam * 60) % 192).astype(np.uint8)
    img[..., 1] += ((yy * 7 + ep * 40) % 192).astype(np.uint8)
    img[..., 2] += (100 + 50 * cam + 11 * fr + 3 * ep) % 192
    return img


def depth_frame(h, w, ep, fr):
    """float32 metres (h, w, 1): a smooth log sweep over [depth_min, depth_max] shifted by (episode, frame), plus
    out-of-range pixels (clamped by lerobot's quantiser) in the first row."""
    import numpy as np

    yy, xx = np.mgrid[0:h, 0:w]
    phase = (xx / (w - 1) * 0.7 + yy / (h - 1) * 0.3 + fr * 0.07 + ep * 0.19) % 1.0
    depth = (DEPTH_MIN * (DEPTH_MAX / DEPTH_MIN) ** phase).astype(np.float32)
    depth[0, :4] = [0.0, 0.004, 12.0, 50.0]
    depth[0, 4 + (fr % 4)] = DEPTH_MAX  # exact bounds too
    depth[0, 9 + (ep % 3)] = DEPTH_MIN
    return depth[..., None]


def write(root, size):
    import shutil

    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    h, w = (int(v) for v in size.split("x"))
    sizes = {RGB[0]: (h, w), RGB[1]: (32, 32)}  # SVT-AV1 crashes below 32x32
    if root.exists():
        shutil.rmtree(root)
    features = {
        "observation.state": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]},
        **{
            cam: {"dtype": "video", "shape": (ch, cw, 3), "names": ["height", "width", "channels"]}
            for cam, (ch, cw) in sizes.items()
        },
        DEPTH: {
            "dtype": "video",
            "shape": (h, w, 1),
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True},
        },
        "note": {"dtype": "string", "shape": (1,), "names": None},
    }
    ds = LeRobotDataset.create(
        repo_id="local/depth",
        fps=FPS,
        root=root,
        features=features,
        use_videos=True,
        robot_type="synthetic",
        video_files_size_in_mb=0.025,
        data_files_size_in_mb=0.004,
    )
    for ep, n in enumerate(LENGTHS):
        for fr in range(n):
            state = np.array([ep * 100 + fr, fr / 10], dtype=np.float32)
            frame = {
                "observation.state": state,
                "action": state + np.float32(0.5),
                "note": f"e{ep}-f{fr}",
                "task": f"task {ep % 2}",
                DEPTH: depth_frame(h, w, ep, fr),
            }
            for cam_id, (cam, (ch, cw)) in enumerate(sizes.items()):
                frame[cam] = rgb_frame(ch, cw, ep, fr, cam_id)
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    files = {cam: len(list((root / "videos" / cam).rglob("*.mp4"))) for cam in (*RGB, DEPTH)}
    print(json.dumps({"video_files": files, "depth_info": ds.meta.features[DEPTH]["info"]}), flush=True)


def open_dataset(root, unit, window=False, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    delta = {DEPTH: WINDOW} if window else None
    return LeRobotDataset("local/depth", root=root, depth_output_unit=unit, delta_timestamps=delta, **kw)


def dump(root, prefix, annotated):
    import numpy as np
    import torch

    arrays, strings, language, dtypes = {}, {}, {}, {}
    configs = {
        "mm": ("mm", False, {}),
        "m": ("m", False, {}),
        "mm_window": ("mm", True, {}),
        "m_window": ("m", True, {}),
        "uint8": ("mm", False, {"return_uint8": True}),
    }
    backend = None
    for name, (unit, window, kw) in configs.items():
        ds = open_dataset(root, unit, window, **kw)
        backend = ds._video_backend if hasattr(ds, "_video_backend") else getattr(ds, "video_backend", None)
        if name in ("mm", "m"):
            for key, stats in ds.meta.stats.items():
                for stat, value in stats.items():
                    arrays[f"stats/{unit}/{key}/{stat}"] = np.asarray(value)
        dtypes[name] = {}
        for i in range(len(ds)):
            sample = ds[i]
            index = int(sample["index"])
            for key, value in sample.items():
                if isinstance(value, torch.Tensor):
                    dtypes[name][key] = str(value.dtype)
                    keep = name == "mm" or key in (DEPTH, f"{DEPTH}_is_pad") or (name == "uint8" and key in RGB)
                    if keep:
                        arrays[f"{name}/{index}/{key}"] = value.numpy()
                elif name == "mm" and isinstance(value, str):
                    strings.setdefault(index, {})[key] = value
                elif name == "mm" and key.startswith("language_"):
                    language.setdefault(index, {})[key] = value
    np.savez(f"{prefix}.npz", **arrays)
    meta = {
        "video_backend": backend,
        "len": len(ds),
        "window": WINDOW,
        "depth_key": DEPTH,
        "rgb_keys": list(RGB),
        "strings": strings,
        "language": language if annotated else {},
        "dtypes": dtypes,
    }
    Path(f"{prefix}.json").write_text(json.dumps(meta))
    print(json.dumps({"len": len(ds), "video_backend": backend, "arrays": len(arrays), "dtypes": dtypes["mm"]}))


def collate(root, out):
    from lerobot_language import collate_compare

    from robostream.datasets.map_style import LeRobotDataset as RobostreamDataset

    results = {}
    for unit, window in (("mm", False), ("m", True)):
        theirs = open_dataset(root, unit, window)
        ours = RobostreamDataset(
            root=root, depth_output_unit=unit, delta_timestamps={DEPTH: WINDOW} if window else None
        )
        results[f"{unit}{'_window' if window else ''}"] = collate_compare(
            [theirs[i] for i in COLLATE_POSITIONS], [ours[i] for i in COLLATE_POSITIONS]
        )
    Path(out).write_text(json.dumps(results))
    print(json.dumps(results))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--hf-home", default=None)
    ap.add_argument("--write", action="store_true", help="write the dataset at ROOT with lerobot's writer")
    ap.add_argument("--size", default="32x48", help="HxW of the depth camera and observation.images.front")
    ap.add_argument("--annotate", action="store_true", help="add lerobot-annotate's language columns")
    ap.add_argument("--dump", default=None, metavar="PREFIX", help="dump lerobot's samples and stats")
    ap.add_argument("--collate", default=None, metavar="OUT.json", help="lerobot_collate_fn on both packages")
    args = ap.parse_args(argv)
    setup_offline_env(args.hf_home)
    root = Path(args.root)
    if args.write:
        write(root, args.size)
    if args.annotate:
        from lerobot_language import annotate

        annotate(root, root.parent / f"{root.name}.staging")
    if args.dump:
        dump(root, args.dump, args.annotate)
    if args.collate:
        try:
            collate(root, args.collate)
        except Exception:  # robostream's failure is the test's to report; lerobot's dump above stands
            Path(args.collate).write_text(json.dumps({"error": traceback.format_exc()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
