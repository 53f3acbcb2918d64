"""Batched image augmentation with lerobot's `ImageTransforms` distribution (see batch_transforms.py).

Needs torch, numpy and OpenCV (robostream's own dependencies); only the training command (robostream.lerobot) imports
this package.
"""

from robostream.augment.batch_transforms import BatchImageTransforms
from robostream.augment.params import AffineOp, FactorOp, Plan, sample_seed

__all__ = ["AffineOp", "BatchImageTransforms", "FactorOp", "Plan", "sample_seed"]
