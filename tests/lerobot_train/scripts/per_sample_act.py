"""ACT with a per-sample loss (its L1 term per sample), which lerobot's weighted loss asks for
(`forward(batch, reduction="none")`); the policies that give one (pi0, pi05, smolvla, ...) need a VLM's weights."""

import contextlib
from collections.abc import Iterator

import torch.nn.functional as F
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.utils.constants import ACTION, OBS_IMAGES

LEROBOTS_FORWARD = ACTPolicy.forward


def per_sample_forward(self, batch, reduction="mean"):
    if reduction == "mean":
        return LEROBOTS_FORWARD(self, batch)
    batch = dict(batch)
    batch[OBS_IMAGES] = [batch[key] for key in self.config.image_features]
    actions_hat, _ = self.model(batch)
    valid = ~batch["action_is_pad"].unsqueeze(-1)
    return (F.l1_loss(batch[ACTION], actions_hat, reduction="none") * valid).flatten(1).mean(1), {}


@contextlib.contextmanager
def per_sample_losses() -> Iterator[None]:
    """ACTPolicy.forward gives per-sample losses inside the block (lerobot's again after it: the interpreter that
    runs the reference scripts runs others)."""
    ACTPolicy.forward = per_sample_forward
    try:
        yield
    finally:
        ACTPolicy.forward = LEROBOTS_FORWARD
