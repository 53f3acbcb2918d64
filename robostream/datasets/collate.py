"""The collate of samples: torch's `default_collate`, except that language columns stay Python lists.

A language column's value is a list of dicts per sample (format/language.py); `default_collate` would transpose
those lists (and fail on lists of different lengths). Each batch instead holds, per such key, the list of the B
samples' values, with lerobot's rule for list keys (`lerobot.utils.collate.lerobot_collate_fn`): every sample of
a batch carries the key, or none does. lerobot 0.6.1's own collate drops the language columns from the batch (it
keeps only the rendered `messages` keys); here they stay, so a processor after the collate still sees them.
The whole-batch path (batch_assembly.py) gives the same lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import default_collate


def list_keys(samples: Sequence[dict[str, Any]]) -> list[str]:
    """The keys whose value is a Python list in some sample (language columns), each checked to be in every
    sample: a batch where only some samples carry one is an error naming it."""
    keys = list(dict.fromkeys(k for sample in samples for k, v in sample.items() if isinstance(v, list)))
    for key in keys:
        carrying = sum(key in sample for sample in samples)
        if carrying != len(samples):
            raise ValueError(
                f"inconsistent batch: {carrying}/{len(samples)} samples carry {key!r}; every sample "
                "of a batch must carry it (in a mixture, features='union' gives [] where a source "
                "lacks it)"
            )
    return keys


def collate_samples(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A batch of `samples`: `default_collate` of everything but the list keys, which stay lists of B values."""
    keys = list_keys(samples)
    if not keys:
        return default_collate(list(samples))
    batch = default_collate([{k: v for k, v in sample.items() if k not in keys} for sample in samples])
    return {key: [sample[key] for sample in samples] if key in keys else batch[key] for key in samples[0]}
