"""How many samples each source of a mixture gives per epoch, and which. Pure functions: lists/numpy in and out.

The semantics are MosaicML streaming's (`Stream(proportion | repeat | choose)`, `epoch_size`, `sampling_method`),
with the unit a sample (a frame that anchors a window) and these choices of ours:
- Per-source counts are exact and deterministic: proportions give floor(E * p_s / sum p) plus one more for the
  sources with the largest remainders (ties: lower source first), so they always sum to E.
- A source asked for n samples of its N gives n // N full passes plus one partial pass of n % N samples, without
  replacement inside the pass. The partial pass takes whole episodes where it can (fewer files touched): a
  permutation of the source's episodes, the longest prefix that fits, then a contiguous run of the next episode for
  the remainder. "balanced" draws a new subset every epoch, "fixed" the same one every epoch.
- An epoch's "units" are contiguous frame ranges of episodes (whole episodes, and at most one run per source);
  the streaming dataset lays them out like the episodes of a single dataset (permuted by (seed, epoch), cut into
  canonical streams), so everything that holds for one dataset holds for a mixture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from robostream.numbers import finite_number
from robostream.plan.order import PURPOSE_LANES, PURPOSE_MIXTURE, rng_for

SamplingMethod = Literal["balanced", "fixed"]
LaneBatchingMethod = Literal["per_stream", "stratified"]  # the batchings that plan every source apart (lanes)
BatchingMethod = Literal["random"] | LaneBatchingMethod  # how a mixture's sources share batches
DEFAULT_BATCHING: BatchingMethod = "random"  # the datasets' default (the benchmark and training command use it)
# An epoch's plan holds one unit per episode per pass (~150 bytes, built again in every process at every epoch):
# 4M units are ~0.6 GB and seconds of planning. A weight asking for more is refused at construction rather than
# failing later with a MemoryError (choose=10**18) or an OverflowError (repeat=1e308).
MAX_EPOCH_UNITS = 1 << 22


@dataclass(frozen=True)
class Weight:
    """At most one of proportion (relative), repeat (x the source's size) or choose (a count); none: repeat 1."""

    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [name for name in ("proportion", "repeat", "choose") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"a source takes at most one of proportion, repeat or choose; got {' and '.join(given)}")
        for name in given:
            finite_number(getattr(self, name), what=name, minimum=0)
        if self.choose is not None and int(self.choose) != self.choose:
            raise ValueError(f"choose={self.choose!r}: expected a whole number of samples")

    def __str__(self) -> str:
        given = [
            f"{name}={getattr(self, name)!r}"
            for name in ("proportion", "repeat", "choose")
            if getattr(self, name) is not None
        ]
        return given[0] if given else "repeat=1 (no weight)"


def samples_per_source(sizes: Sequence[int], weights: Sequence[Weight], epoch_size: int | None) -> list[int]:
    """Samples each source gives per epoch.

    Args:
        sizes: samples each source holds (its selected episodes' frames).
        weights: one per source. Proportions (relative) cannot be mixed with repeat/choose (absolute) or with
            unweighted sources.
        epoch_size: samples per epoch for proportions (default: the sources' total); not allowed with absolute
            weights, whose sum is the epoch.

    Returns:
        One count per source.
    """
    if len(sizes) != len(weights) or not sizes:
        raise ValueError(f"{len(sizes)} source sizes for {len(weights)} weights; need at least one source")
    relative = [w.proportion is not None for w in weights]
    if any(relative) and not all(relative):
        mixed = [i for i, r in enumerate(relative) if not r]
        raise ValueError(
            f"sources {mixed} have no proportion while others do: relative weights (proportion) "
            "cannot be mixed with absolute ones (repeat, choose) or unweighted sources"
        )
    if epoch_size is not None:
        finite_number(epoch_size, what="epoch_size", minimum=1)
    if epoch_size is not None and int(epoch_size) != epoch_size:
        raise ValueError(f"epoch_size={epoch_size!r}: expected a positive whole number of samples")
    if not all(relative):
        if epoch_size is not None:
            raise ValueError("epoch_size applies to proportion weights; with repeat/choose the epoch is their sum")
        counts = [
            int(w.choose) if w.choose is not None else int(Fraction(w.repeat if w.repeat is not None else 1) * n)
            for w, n in zip(weights, sizes)
        ]
        if not sum(counts):
            raise ValueError(_no_sample(weights))
        return counts
    shares = [Fraction(w.proportion) for w in weights if w.proportion is not None]  # all of them (checked above)
    if sum(shares) <= 0:
        raise ValueError(_no_sample(weights))
    total = int(epoch_size) if epoch_size is not None else int(sum(sizes))
    exact = [total * s / sum(shares) for s in shares]
    counts = [int(e) for e in exact]  # floors (non-negative)
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _no_sample(weights: Sequence[Weight]) -> str:
    return (
        f"the weights [{', '.join(map(str, weights))}] give an epoch no sample (proportions must not all be "
        "0, nor repeat/choose): give at least one source a weight above 0"
    )


def check_epoch_units(
    counts: Sequence[int],
    lengths: Sequence[Sequence[int] | np.ndarray],
    weights: Sequence[Weight],
    epoch_size: int | None,
) -> None:
    """Raise ValueError, naming the weight (or epoch_size) that asks for it, when an epoch's plan would hold more
    than MAX_EPOCH_UNITS units (one per episode per pass) and more than one pass over every source's episodes.

    Args:
        counts: samples each source gives per epoch (`samples_per_source`).
        lengths: per source, samples of each selected episode.
        weights: one per source.
        epoch_size: the mixture's epoch_size (what proportions are shares of).
    """
    sizes = [int(np.sum(n)) for n in lengths]  # Python ints: a count may exceed int64
    units = [(count // size + 1) * len(n) for count, size, n in zip(counts, sizes, lengths)]  # + the partial pass
    if sum(units) <= max(MAX_EPOCH_UNITS, sum(len(n) for n in lengths)):
        return
    s = max(range(len(units)), key=units.__getitem__)
    asked = f"epoch_size={epoch_size!r} ({weights[s]})" if weights[s].proportion is not None else str(weights[s])
    raise ValueError(
        f"source {s}: {asked} asks for {_count(counts[s])} samples per epoch, "
        f"{_count(counts[s] // sizes[s])} passes over its {len(lengths[s])} episodes ({sizes[s]} "
        f"samples): the epoch's plan would hold {_count(sum(units))} units (one per episode per pass), "
        f"more than {MAX_EPOCH_UNITS} (~150 bytes each, planned again in every process at every epoch): "
        "lower the weight, or run more, shorter epochs"
    )


def _count(n: int) -> str:
    """An integer for a message: its digits, or its order of magnitude when it has more than 12."""
    digits = str(n)
    return digits if len(digits) <= 12 else f"~10^{len(digits) - 1}"


def partial_pass(
    lengths: Sequence[int] | np.ndarray, count: int, rng: np.random.Generator
) -> list[tuple[int, int, int]]:
    """`count` distinct samples of a source (0 < count < its size): whole episodes, then one run of the next.

    Args:
        lengths: samples of each episode of the source (by position).
        count: samples to take.
        rng: the draw (per epoch for "balanced", per seed for "fixed").

    Returns:
        Units (episode position, first frame, stop frame), whole episodes first in drawn order.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if not 0 < count < int(lengths.sum()):
        raise ValueError(f"partial_pass: count {count} must be in (0, {int(lengths.sum())})")
    order = rng.permutation(len(lengths))
    ends = np.cumsum(lengths[order])
    whole = int(np.searchsorted(ends, count, side="right"))  # episodes that fit entirely
    units = [(int(p), 0, int(lengths[p])) for p in order[:whole]]
    rest = count - (int(ends[whole - 1]) if whole else 0)
    if rest:
        cut = int(order[whole])  # longer than `rest`, else it would have fit
        start = int(rng.integers(0, int(lengths[cut]) - rest + 1))
        units.append((cut, start, start + rest))
    return units


@dataclass(frozen=True)
class EpochUnits:
    """The frame ranges an epoch reads: unit u is frames [first[u], first[u] + length[u]) of episode position
    episode[u] of source source[u]."""

    source: np.ndarray
    episode: np.ndarray
    first: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return len(self.length)

    def locate(self, unit: int) -> tuple[int, int, int]:
        """(source, episode position, first frame) of a unit."""
        return int(self.source[unit]), int(self.episode[unit]), int(self.first[unit])

    def of_source(self, source: int) -> EpochUnits:
        """The units of one source, in order."""
        keep = self.source == source
        return EpochUnits(self.source[keep], self.episode[keep], self.first[keep], self.length[keep])


def epoch_units(
    lengths: Sequence[Sequence[int] | np.ndarray],
    counts: Sequence[int],
    *,
    seed: int,
    epoch: int,
    sampling_method: SamplingMethod,
) -> EpochUnits:
    """The units of one epoch: per source its full passes (every episode whole) and its partial pass.

    Args:
        lengths: per source, samples of each selected episode.
        counts: samples each source gives this epoch (`samples_per_source`).
        seed: the dataset's seed.
        epoch: the epoch ("balanced" draws its partial passes per epoch).
        sampling_method: "balanced" or "fixed".

    Returns:
        The units, source by source, full passes before the partial pass (the streaming dataset permutes them).
    """
    if sampling_method not in ("balanced", "fixed"):
        raise ValueError(f"sampling_method={sampling_method!r}: expected 'balanced' or 'fixed'")
    rows: list[tuple[int, int, int, int]] = []
    for s, (listed_lengths, count) in enumerate(zip(lengths, counts)):
        source_lengths = np.asarray(listed_lengths, dtype=np.int64)
        size = int(source_lengths.sum())
        if count and not size:
            raise ValueError(f"source {s} holds no samples but is asked for {count}")
        passes, rest = divmod(int(count), size) if size else (0, 0)
        whole = [(s, p, 0, int(n)) for p, n in enumerate(source_lengths.tolist())]
        rows.extend(whole * passes)
        if rest:
            rng = rng_for(seed, epoch if sampling_method == "balanced" else 0, PURPOSE_MIXTURE, s)
            rows.extend((s, p, a, b - a) for p, a, b in partial_pass(source_lengths, rest, rng))
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return EpochUnits(*(np.ascontiguousarray(table[:, i]) for i in range(4)))


def per_stream_counts(
    quotas: Sequence[int], batch_size: int, *, seed: int, epoch: int, worker: int, generation: int, shuffle: bool
) -> np.ndarray:
    """How many samples of each source every batch of one worker holds (batching="per_stream"): one source each.

    Source s gives ceil(q_s / B) batches, all whole but its last, which holds what is left of its quota. Worker w of
    every rank draws the same order of sources, so every global batch (one per rank at a step) comes from one
    source: a permutation of the batches per (seed, epoch, worker, generation); sources in order when not
    shuffled. `generation` counts the layouts an epoch went through: a job that continues on another layout draws
    a new order for what remains.

    Args:
        quotas: samples of each source this worker yields (a lane's quota for the worker; 0: none).
        batch_size: samples per batch B.
        seed, epoch: the dataset's.
        worker: the worker's role index (0 .. num_workers - 1).
        generation: see above.
        shuffle: permute (else sources one after the other).

    Returns:
        An int64 array (batches, sources) of one-hot rows; batches = sum of ceil(q_s / B).
    """
    q = np.asarray(quotas, dtype=np.int64)
    per_source = -(-q // batch_size)
    lanes = np.repeat(np.arange(len(q), dtype=np.int64), per_source)  # the source of each batch
    if shuffle:
        lanes = rng_for(seed, epoch, PURPOSE_LANES, (generation << 32) + worker).permutation(lanes)
    out = np.zeros((len(lanes), len(q)), dtype=np.int64)
    out[np.arange(len(lanes)), lanes] = batch_size
    # Each source's last batch (its first in reversed order) holds the rest of its quota.
    given, first_reversed = np.unique(lanes[::-1], return_index=True)
    out[len(lanes) - 1 - first_reversed, given] = q[given] - (per_source[given] - 1) * batch_size
    return out


def stratified_counts(quotas: Sequence[int], batch_size: int) -> np.ndarray:
    """How many samples of each source every batch of one worker holds (batching="stratified").

    Each source's share of a batch is its share of the worker's samples, p_s = q_s / Q. Every batch but the last
    gives each source floor(B p_s) or ceil(B p_s) samples (exact when B p_s is an integer): the floors first, then
    one more to the sources furthest behind their share so far (largest cumulative deficit, ties to the lower
    index), so that every source stays within about a sample of its share at every batch. The last batch takes
    what is left, so each source's count over the worker's batches is exactly its quota.

    Args:
        quotas: samples of each source this worker yields (a lane's quota for the worker; 0: none).
        batch_size: samples per batch B; the last batch holds Q - (n - 1) B.

    Returns:
        An int64 array (batches, sources); batches = ceil(Q / B).
    """
    q = np.asarray(quotas, dtype=np.int64)
    total = int(q.sum())
    batches = -(-total // batch_size)
    out = np.zeros((batches, len(q)), dtype=np.int64)
    if batches == 0:
        return out
    share = q.astype(np.float64) * (batch_size / total)  # B p_s
    floors = np.floor(share).astype(np.int64)
    taken = np.zeros(len(q), dtype=np.int64)
    order = np.arange(len(q))
    for b in range(batches - 1):
        counts = np.minimum(floors, q - taken)
        left = batch_size - int(counts.sum())
        deficit = (b + 1) * share - (taken + counts)  # behind the share so far (+ this batch's floor)
        while left > 0:
            room = np.flatnonzero(q - taken - counts > 0)
            # most behind first; ties to the lower index (np.lexsort: the last key is the primary one)
            ranked = room[np.lexsort((order[room], -deficit[room]))][:left]
            counts[ranked] += 1
            deficit[ranked] -= 1
            left -= len(ranked)
        out[b] = counts
        taken += counts
    out[-1] = q - taken
    return out


def lane_batch_counts(
    batching: LaneBatchingMethod,
    quotas: Sequence[int],
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    worker: int,
    generation: int,
    shuffle: bool,
) -> np.ndarray:
    """One worker's (batches, sources) matrix of samples of each source in each batch, by `batching`'s function.

    Args:
        batching: "per_stream" (`per_stream_counts`) or "stratified" (`stratified_counts`).
        quotas, batch_size: samples of each source the worker yields, samples per batch.
        seed, epoch, worker, generation, shuffle: the order of per_stream's batches (see `per_stream_counts`).
    """
    if batching == "per_stream":
        return per_stream_counts(
            quotas, batch_size, seed=seed, epoch=epoch, worker=worker, generation=generation, shuffle=shuffle
        )
    if batching == "stratified":
        return stratified_counts(quotas, batch_size)
    raise ValueError(f"batching={batching!r}: expected 'per_stream' or 'stratified'")
