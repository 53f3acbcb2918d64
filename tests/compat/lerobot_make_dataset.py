#!/usr/bin/env python
"""Write a small, deterministic LeRobot v3.0 dataset with lerobot's own writer (reference side of tests/compat).

Runs under an interpreter that has the real `lerobot` package installed (NOT robostream's venv); it is
self-contained and imports nothing from robostream. It never touches the network: HF_HUB_OFFLINE=1 and
HF_DATASETS_OFFLINE=1 are forced, and HF_HOME is set to --hf-home (default: $HF_HOME if set, else a fresh
temporary directory) before lerobot / huggingface_hub are imported.

Usage:
    python lerobot_make_dataset.py OUT_ROOT [--hf-home DIR] [--episodes 5] [--data-mb 0.004] [--video-mb 0.02]
                                   [--chunks-size N] [--meta-buffer 10] [--vcodec libsvtav1]
                                   [--cameras N --size HxW --fps F --length L]   (benchmark-sized datasets)

Content (deterministic):
  * 2 video cameras (H x W x 3):
      observation.images.front : 96x128,  observation.images.wrist : 64x96
    Rows 0..7 encode episode_index and rows 8..15 frame_index as 16 black/white blocks (MSB first); below, a
    per-camera gradient shifted by (episode, frame).
  * observation.state, action : float32[6]; state[j] = episode*1000 + frame + j/10, action = state + 0.5
  * fps 10, episode lengths LENGTHS[:n], tasks alternate between two strings.
File-size limits are tiny so that several data and video files per camera are produced.
"""

import argparse
import sys

from lerobot_offline import setup_offline_env

FPS = 10
LENGTHS = [20, 33, 25, 40, 28, 36, 22, 31]
TASKS = ["pick up the red cube", "place the cube in the bin"]
CAMS = {
    "observation.images.front": (96, 128),
    "observation.images.wrist": (64, 96),
}


def encode_bits(img, value, row0):
    h, w, _ = img.shape
    bw = w // 16
    for b in range(16):
        bit = (value >> (15 - b)) & 1
        img[row0 : row0 + 8, b * bw : (b + 1) * bw, :] = 255 if bit else 0


def make_image(h, w, ep, fr, cam_id):
    import numpy as np

    yy, xx = np.mgrid[0:h, 0:w]
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[..., 0] = (xx * 2 + fr * 5 + cam_id * 40) % 256
    img[..., 1] = (yy * 2 + ep * 30) % 256
    img[..., 2] = (128 + 60 * cam_id + 3 * fr) % 256
    encode_bits(img, ep, 0)
    encode_bits(img, fr, 8)
    return img


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--hf-home", default=None, help="HF_HOME for this run (default: $HF_HOME, else a temp dir)")
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--data-mb", type=float, default=0.004)
    ap.add_argument("--video-mb", type=float, default=0.02)
    ap.add_argument("--chunks-size", type=int, default=None, help="max files per chunk dir (lerobot default 1000)")
    ap.add_argument("--meta-buffer", type=int, default=10, help="episodes buffered before a meta/episodes flush")
    ap.add_argument("--vcodec", default=None, help="default: lerobot's default (libsvtav1)")
    ap.add_argument("--cameras", type=int, default=None, help="N cameras cam0.. of --size instead of front/wrist")
    ap.add_argument("--size", default="256x256", help="HxW of every camera with --cameras")
    ap.add_argument("--fps", type=int, default=FPS)
    ap.add_argument("--length", type=int, default=None, help="frames per episode (default: the LENGTHS cycle)")
    args = ap.parse_args(argv)
    cams = CAMS
    if args.cameras:
        h, w = (int(v) for v in args.size.split("x"))
        cams = {f"observation.images.cam{i}": (h, w) for i in range(args.cameras)}

    setup_offline_env(args.hf_home)

    import shutil
    from pathlib import Path

    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(args.root)
    if root.exists():
        shutil.rmtree(root)

    features = {
        "observation.state": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "action": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
    }
    for cam, (h, w) in cams.items():
        features[cam] = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}

    kwargs = {}
    if args.vcodec:
        from lerobot.configs import RGBEncoderConfig

        kwargs["rgb_encoder"] = RGBEncoderConfig(vcodec=args.vcodec)

    ds = LeRobotDataset.create(
        repo_id="local/test",
        fps=args.fps,
        features=features,
        root=root,
        robot_type="synthetic",
        use_videos=True,
        data_files_size_in_mb=args.data_mb,
        video_files_size_in_mb=args.video_mb,
        metadata_buffer_size=args.meta_buffer,
        **kwargs,
    )
    if args.chunks_size is not None:
        ds.meta.update_chunk_settings(chunks_size=args.chunks_size)

    for ep in range(args.episodes):
        n = args.length or LENGTHS[ep % len(LENGTHS)]
        task = TASKS[ep % 2]
        for fr in range(n):
            state = (ep * 1000 + fr + np.arange(6) / 10).astype(np.float32)
            frame = {"observation.state": state, "action": (state + 0.5).astype(np.float32), "task": task}
            for cam_id, (cam, (h, w)) in enumerate(cams.items()):
                frame[cam] = make_image(h, w, ep, fr, cam_id)
            ds.add_frame(frame)
        ds.save_episode()
        print(f"saved episode {ep}: {n} frames, task={task!r}", flush=True)

    if hasattr(ds, "finalize"):
        ds.finalize()
    print("video codec:", {k: ds.meta.features[k].get("info", {}).get("video.codec") for k in cams})
    print("total_frames:", ds.meta.total_frames, "total_episodes:", ds.meta.total_episodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
