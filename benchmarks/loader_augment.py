"""Samples/s through the loader with lerobot's augmentations on and off: lerobot's DataLoader (its LeRobotDataset
with `image_transforms=ImageTransforms(cfg)`, per sample per camera in the workers) vs robostream's
(StreamingDataLoader with `batch_transform=BatchImageTransforms(cfg)`, whole uint8 batches in the workers).

Run in lerobot's environment from the repository root, side by side, alternating the four loaders:

    .venv-lerobot/bin/python benchmarks/loader_augment.py --root /path/to/dataset --batches 60 --rounds 2

(`--loaders robostream --kinds augmented`: one loader alone, e.g. to compare two checkouts on PYTHONPATH.)

Both: the same dataset, single frames (no windows), batch 32, 2 workers, shuffled, lerobot's default transform set
enabled with max_num_transforms=3. A loader's rate is taken over `--batches` batches after 5 warm-up batches
(worker start and first decodes excluded), and the best of the rounds is kept.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.transforms import ImageTransforms, ImageTransformsConfig

from robostream import StreamingDataLoader, StreamingLeRobotDataset
from robostream.augment import BatchImageTransforms

WARMUP = 5


def lerobot_loader(root: str, batch: int, workers: int, augment: bool) -> torch.utils.data.DataLoader:
    transforms = ImageTransforms(ImageTransformsConfig(enable=True, max_num_transforms=3)) if augment else None
    dataset = LeRobotDataset("bench/local", root=root, image_transforms=transforms)
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch, num_workers=workers, shuffle=True, generator=torch.Generator().manual_seed(0)
    )


def robostream_loader(root: str, batch: int, workers: int, augment: bool) -> StreamingDataLoader:
    dataset = StreamingLeRobotDataset(root=root, seed=0, return_uint8=True)
    cameras = dataset.meta.camera_keys
    transform = (
        BatchImageTransforms(ImageTransformsConfig(enable=True, max_num_transforms=3), seed=0, camera_keys=cameras)
        if augment
        else None
    )
    return StreamingDataLoader(dataset, batch_size=batch, num_workers=workers, batch_transform=transform)


def samples_per_s(loader: torch.utils.data.DataLoader, batches: int) -> float:
    it = iter(loader)
    for _ in range(WARMUP):
        next(it)
    start, samples = time.perf_counter(), 0
    for batch in itertools.islice(it, batches):
        samples += len(batch["index"])
    seconds = time.perf_counter() - start
    del it
    return samples / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loaders", nargs="+", choices=("lerobot", "robostream"), default=["lerobot", "robostream"])
    parser.add_argument("--kinds", nargs="+", choices=("plain", "augmented"), default=["plain", "augmented"])
    args = parser.parse_args()
    makers = {name: make for name, make in (("lerobot", lerobot_loader), ("robostream", robostream_loader))}
    makers = {name: makers[name] for name in args.loaders}
    augments = [kind == "augmented" for kind in args.kinds]
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for (name, make), augment in itertools.product(makers.items(), augments):
            key = f"{name} {'augmented' if augment else 'plain'}"
            rate = samples_per_s(make(args.root, args.batch, args.workers, augment), args.batches)
            best[key] = max(best.get(key, 0.0), rate)
            print(f"{key:24s} {rate:8.1f} samples/s", flush=True)
    print(json.dumps(best))
    for kind in args.kinds if len(makers) == 2 else ():
        print(f"{kind}: robostream / lerobot = {best[f'robostream {kind}'] / best[f'lerobot {kind}']:.2f}x")
    for name in makers if len(augments) == 2 else ():
        print(f"{name}: augmented / plain = {best[f'{name} augmented'] / best[f'{name} plain']:.2f}")


if __name__ == "__main__":
    main()
