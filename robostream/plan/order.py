"""Deterministic randomness: every random choice of an epoch derives from (seed, epoch, purpose, stream)."""

from __future__ import annotations

import numpy as np

PURPOSE_EPISODES = 1
PURPOSE_POOL = 2
PURPOSE_MIXTURE = 3  # a source's partial pass in a mixture


def rng_for(seed: int, epoch: int, purpose: int, stream: int = 0) -> np.random.Generator:
    """An independent PCG64 generator per (seed, epoch, purpose, stream); identical in every process."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, purpose, stream])))


def epoch_episode_order(num_episodes: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order episodes (by position) are laid out in this epoch: a permutation, or chronological."""
    if not shuffle:
        return np.arange(num_episodes)
    return rng_for(seed, epoch, PURPOSE_EPISODES).permutation(num_episodes)
