"""Augmentation throughput: lerobot's per-sample `ImageTransforms` vs robostream's `BatchImageTransforms`.

Run in lerobot's environment (lerobot, torchvision and robostream installed), from the repository root:

    .venv-lerobot/bin/python benchmarks/augment_throughput.py --batch 32 --cameras 3 --height 96 --width 128 \\
        --window 1 --repeats 20

Both use lerobot's default transform set, enabled, max_num_transforms=3, on one thread (as in a DataLoader worker).
lerobot: its transform called once per sample per camera on a float32 [C, H, W] frame ([T, C, H, W] with a window),
as its dataset does. robostream: one call per batch of [B, C, H, W] ([B, T, C, H, W]) per camera, on uint8 and on
float32 batches. A "sample" is one dataset item with all its cameras; each timed batch has new indices (new draws).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from lerobot.transforms import ImageTransforms, ImageTransformsConfig

from robostream.augment import BatchImageTransforms


def make_batch(*, args: argparse.Namespace, repeat: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    frame = (args.window,) if args.window > 1 else ()
    shape = (args.batch, *frame, 3, args.height, args.width)
    g = torch.Generator().manual_seed(repeat)
    batch = {"index": torch.arange(args.batch) + repeat * args.batch}
    for c in range(args.cameras):
        images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        batch[f"observation.images.cam{c}"] = images if dtype == torch.uint8 else images.float() / 255
    return batch


def time_batches(run: Callable[[dict[str, torch.Tensor]], object], batches: list[dict[str, torch.Tensor]]) -> float:
    """Seconds per batch, after one untimed warm-up batch."""
    run(batches[0])
    start = time.perf_counter()
    for batch in batches[1:]:
        run(batch)
    return (time.perf_counter() - start) / (len(batches) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--window", type=int, default=1, help="frames per sample and camera (1: [C, H, W])")
    parser.add_argument("--repeats", type=int, default=20, help="timed batches per method")
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = ImageTransformsConfig(enable=True, max_num_transforms=3)
    cameras = [f"observation.images.cam{c}" for c in range(args.cameras)]
    lerobot_tf = ImageTransforms(config)
    ours = BatchImageTransforms(config, seed=0, camera_keys=cameras)

    def per_sample(batch: dict[str, torch.Tensor]) -> None:
        for key in cameras:
            for frames in batch[key]:
                lerobot_tf(frames)

    float_batches = [make_batch(args=args, repeat=r, dtype=torch.float32) for r in range(args.repeats + 1)]
    uint8_batches = [make_batch(args=args, repeat=r, dtype=torch.uint8) for r in range(args.repeats + 1)]
    results = {
        "lerobot ImageTransforms, per sample, float32": time_batches(per_sample, float_batches),
        "robostream BatchImageTransforms, uint8": time_batches(lambda b: ours(b, epoch=0), uint8_batches),
        "robostream BatchImageTransforms, float32": time_batches(lambda b: ours(b, epoch=0), float_batches),
    }
    print(
        f"batch {args.batch}, cameras {args.cameras}, {args.height}x{args.width}, window {args.window}, "
        f"{args.repeats} timed batches, torch threads 1, torch {torch.__version__}"
    )
    baseline = next(iter(results.values()))
    for name, seconds in results.items():
        print(
            f"{name:45s} {seconds * 1e3:8.2f} ms/batch {args.batch / seconds:9.1f} samples/s {baseline / seconds:6.2f}x"
        )


if __name__ == "__main__":
    main()
