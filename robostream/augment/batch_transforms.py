"""lerobot's image augmentation applied to whole batches, with per-sample parameters that a resumed run redraws.

Distribution. lerobot's `ImageTransforms` (a `RandomSubsetApply`) runs per sample per camera in a DataLoader worker:
it draws min(#transforms of weight > 0, max_num_transforms) of the enabled transforms by `torch.multinomial` without
replacement on the normalised weights (applied in index order unless random_order), then each transform draws its
parameters (ColorJitter: a random order of its adjustments, factors uniform on torchvision's ranges;
SharpnessJitter: uniform; RandomAffine: angle uniform, translation round(uniform(+-t * size)) pixels, scale, shear).
`BatchImageTransforms` makes the very same calls in the same order, but on a private `torch.Generator` seeded per
(sample, camera) by blake2b(seed, epoch, dataset_index, index, camera position) instead of the worker's global RNG:
the same distribution, a different random stream, one that depends only on the sample (not on the worker, the batch
composition or the position in it: the same sample gets the same bits in any batch). `torch.manual_seed(plan.seed)`
before lerobot's transform replays our draw. Frames of one [T, C, H, W] window share a draw, as lerobot's call on the
window does; each camera draws independently.

Kernels vs torchvision 0.26's per-sample v2 functional kernels, float32 on CPU (torch 2.11), as
tests/augment/test_batch_transforms.py asserts them on both paths (apply.py: CPU batches one sample at a time with
OpenCV's hue and numpy's pixel picks, other devices' batches step by step in torch), measured on 48 samples of
96x128 (BENCHMARKS.md, 2026-11-27):
  * brightness, contrast, saturation: bit-identical; asserted max abs diff <= 1e-6 (another build may round an ulp);
  * sharpness (a separable 3x3 box sum, not torchvision's convolution): 3e-7; asserted <= 1e-6;
  * affine (nearest, fill 0, centre): the picks of grid_sample on a grid computed for all samples in one matrix
    product, 1 ulp off torchvision's per-sample bmm at most: 1.7e-6 of the pixels picked differently; asserted
    <= 0.1% (torch's own affine_grid, normalising before the matrix, would move up to 3.5% where picks tie);
  * hue: OpenCV's HSV round trip on CPU 1.3e-6, the torch rebuild from max, chroma and hue 1.4e-6; asserted <= 5e-6;
  * chains of ops (ColorJitter with 4 factors, the default set, all six in random order): 2.7e-6; asserted <= 1e-5;
  * uint8: at most 1 off on 1.7e-5 of the pixels (a float difference crossing a rounding edge); asserted at most
    1 off on <= 0.1% of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from robostream.augment.apply import apply_plans
from robostream.augment.config import parse_config
from robostream.augment.params import Plan, draw_plan, sample_seed


class BatchImageTransforms:
    """lerobot's `ImageTransforms` distribution on whole batches, deterministic per (seed, epoch, sample, camera).

    Camera tensors are [B, C, H, W] or [B, T, C, H, W], uint8 (0..255) or float32 in [0, 1], C 1 or 3. uint8 is
    computed as float32 x / 255 and returned as round(y * 255) clamped to 0..255 (the only quantisation; lerobot's
    float pipeline has none). Keys other than the cameras pass through untouched.

    Args:
        config: lerobot's `ImageTransformsConfig`, or any object with its fields (`enable`, `max_num_transforms`,
            `random_order`, `tfs`: name -> object with `weight`, `type`, `kwargs`). Supported types: ColorJitter,
            SharpnessJitter, RandomAffine (nearest, fill 0, centre) and Identity.
        seed: the run's seed; with the epoch and the sample it determines every draw.
        camera_keys: the batch keys to augment; a camera's position in this sequence is part of its draw's key.

    Raises:
        ValueError: an unsupported transform or kwarg, a bad range, max_num_transforms < 1, repeated camera keys.
    """

    def __init__(self, config: Any, *, seed: int, camera_keys: Sequence[str]) -> None:
        self._spec = parse_config(config)
        self._seed = int(seed)
        self._camera_keys = tuple(camera_keys)
        if len(set(self._camera_keys)) != len(self._camera_keys):
            raise ValueError(f"camera_keys has repeated keys: {self._camera_keys}")

    @property
    def enabled(self) -> bool:
        """False when the config is disabled or has no transform of weight > 0 (batches pass through)."""
        return self._spec.n_subset > 0

    def draw(self, batch: dict[str, Any], *, epoch: int) -> dict[str, list[Plan]]:
        """The plan of each (sample, camera) of a batch: camera key -> B plans in batch order ({} when disabled).

        Args:
            batch: a robostream batch: the camera tensors, `index` (int64 [B]) and optionally `dataset_index`
                (int64 [B], 0 when absent).
            epoch: the epoch being read.
        """
        if not self.enabled:
            return {}
        index = batch["index"].tolist()
        dataset_index = batch["dataset_index"].tolist() if "dataset_index" in batch else [0] * len(index)
        plans: dict[str, list[Plan]] = {}
        for camera, key in enumerate(self._camera_keys):
            images = batch[key]
            if images.shape[0] != len(index):
                raise ValueError(f"{key!r} has {images.shape[0]} samples but 'index' has {len(index)}")
            height, width = images.shape[-2:]
            plans[key] = [
                draw_plan(
                    self._spec,
                    height=height,
                    width=width,
                    seed=sample_seed(seed=self._seed, epoch=epoch, dataset_index=d, index=i, camera=camera),
                )
                for d, i in zip(dataset_index, index, strict=True)
            ]
        return plans

    def __call__(self, batch: dict[str, Any], *, epoch: int) -> dict[str, Any]:
        """A new batch dict with each camera tensor augmented (same shape and dtype); the input is not modified.

        Args:
            batch: a robostream batch (see `draw`).
            epoch: the epoch being read; another epoch draws other parameters.
        """
        out = dict(batch)
        for key, plans in self.draw(batch, epoch=epoch).items():
            out[key] = apply_plans(batch[key], plans)
        return out
