"""Which rank of how many this process is: the environment's answer, kept out of the pure planning code."""

from __future__ import annotations

import os


def resolve_rank_world() -> tuple[int, int]:
    """(rank, world_size) from an initialised torch.distributed group, else RANK/WORLD_SIZE, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world
