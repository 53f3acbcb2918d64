"""Deterministic randomness: every random choice of an epoch derives from (seed, epoch, purpose, stream)."""

from __future__ import annotations

import numpy as np

DEFAULT_SEED = 0  # the datasets' default seed (the benchmark and the training command default to it by name)
PURPOSE_EPISODES = 1
PURPOSE_POOL = 2
PURPOSE_MIXTURE = 3  # a source's partial pass in a mixture
PURPOSE_LANES = 4  # which source each batch comes from (batching="per_stream")


def rng_for(seed: int, epoch: int, purpose: int, stream: int = 0) -> np.random.Generator:
    """An independent PCG64 generator per (seed, epoch, purpose, stream); identical in every process."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, purpose, stream])))


def epoch_episode_order(num_episodes: int, seed: int, epoch: int, shuffle: bool, lane: int = 0) -> np.ndarray:
    """The order episodes (by position) are laid out in this epoch: a permutation, or chronological (`lane`: one
    independent order per source when sources are planned apart)."""
    if not shuffle:
        return np.arange(num_episodes)
    return rng_for(seed, epoch, PURPOSE_EPISODES, lane).permutation(num_episodes)
