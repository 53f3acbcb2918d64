"""How the episodes of an epoch are divided into canonical streams. Pure functions: lists/numpy in and out.

Two strategies, with their trade-off:
- `split_contiguous` (default): the epoch's shuffled episode sequence is concatenated and cut into C slices whose
  lengths differ by at most one sample. Streams are balanced exactly and the division changes every epoch; at most
  C - 1 episodes are cut in two (each half goes to a different stream), the rest stay whole.
- `group_episodes_by_files` + `partition_episodes`: episodes that share any file form a group and whole groups are
  packed into C bins (LPT), so every file is read by one stream only: the best locality for whole-file caches.
  In v3.0 datasets data files and each camera's videos roll over at different episodes, which usually chains
  everything into a few groups; the strategy then needs at least C groups and says so when there are fewer.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

Piece = tuple[int, int, int]  # (episode position in the selection, first frame, one past the last frame)


def group_episodes_by_files(episode_files: Sequence[Sequence[Hashable]]) -> list[list[int]]:
    """Episodes (by position) that share a data or video file, transitively, form one group (union-find).

    Returns the groups as sorted position lists, ordered by their first position.
    """
    parent = list(range(len(episode_files)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[Hashable, int] = {}
    for position, files in enumerate(episode_files):
        for file_id in files:
            if file_id in owner:
                a, b = find(owner[file_id]), find(position)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                owner[file_id] = position
    groups: dict[int, list[int]] = {}
    for position in range(len(episode_files)):
        groups.setdefault(find(position), []).append(position)
    return sorted(groups.values(), key=lambda g: g[0])


def partition_episodes(lengths: Sequence[int] | np.ndarray, n: int) -> list[list[int]]:
    """Deterministic LPT bin packing: items (by position) into n bins balancing the summed lengths.

    Items are taken longest first (ties: lower position first) and each goes to the currently lightest bin
    (ties: lower bin). The heaviest bin is at most 4/3 of the optimum. Each bin's items are returned sorted.
    """
    if n < 1:
        raise ValueError(f"partition_episodes: n must be >= 1, got {n}")
    if len(lengths) < n:
        raise ValueError(f"partition_episodes: {len(lengths)} items cannot fill {n} bins; use fewer bins")
    lengths = np.asarray(lengths, dtype=np.int64)
    if (lengths <= 0).any():
        bad = int(np.flatnonzero(lengths <= 0)[0])
        raise ValueError(f"partition_episodes: item {bad} has non-positive length {int(lengths[bad])}")
    order = np.lexsort((np.arange(len(lengths)), -lengths))
    loads = np.zeros(n, dtype=np.int64)
    bins: list[list[int]] = [[] for _ in range(n)]
    for item in order:
        target = int(np.argmin(loads))  # argmin returns the lowest index among equal loads
        bins[target].append(int(item))
        loads[target] += lengths[item]
    return [sorted(b) for b in bins]


def split_contiguous(
    order: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray, n: int
) -> list[list[Piece]]:
    """Cut the concatenation of episodes (taken in `order`) into n slices of sizes differing by at most one.

    Returns per slice its pieces (position, start, stop), in order. Requires at least n samples in total.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths[list(order)].sum()) if len(order) else 0
    if n < 1 or total < n:
        raise ValueError(f"cannot split {total} samples into {n} streams; use fewer canonical streams")
    bounds = [(total * s) // n for s in range(n + 1)]
    slices: list[list[Piece]] = [[] for _ in range(n)]
    offset, s = 0, 0
    for position in order:
        start, end = offset, offset + int(lengths[position])
        while start < end:
            while bounds[s + 1] <= start:
                s += 1
            stop = min(end, bounds[s + 1])
            slices[s].append((int(position), start - offset, stop - offset))
            start = stop
        offset = end
    return slices
