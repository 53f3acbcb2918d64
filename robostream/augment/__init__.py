"""Batched image augmentation with lerobot's `ImageTransforms` distribution (see batch_transforms.py).

Needs torch and kornia (hue); the rest of robostream does not import this package.
"""

from robostream.augment.batch_transforms import BatchImageTransforms
from robostream.augment.params import AffineOp, FactorOp, Plan, sample_seed

__all__ = ["AffineOp", "BatchImageTransforms", "FactorOp", "Plan", "sample_seed"]
