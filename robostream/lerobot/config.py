"""The training command's configuration: lerobot's `TrainPipelineConfig` plus a `robostream` section.

Every flag of `lerobot-train` keeps its meaning (the same draccus parser, the same validation); `--robostream.*`
adds how robostream reads the data. A mixture is named on the command line (`--dataset.repo_id='[a,b]'`, optionally
`--dataset.root='[ra,rb]'` and `--robostream.weights='[0.7,0.3]'`) or in a mixture file (`--robostream.mixture=
mix.json|yaml`: a list of robostream.Source arguments, which may also give each source its episodes, feature_map,
revision and weight kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

import yaml
from lerobot.configs.train import TrainPipelineConfig

from robostream.datasets.mixture import DEFAULT_FEATURES, DEFAULT_SAMPLING_METHOD, Source
from robostream.datasets.sources_file import sources_from_file
from robostream.datasets.stream_options import (
    DEFAULT_POOL_SIZE,
    DEFAULT_PREFETCH_PIECES,
    DEFAULT_UNEVEN,
)
from robostream.numbers import finite_number
from robostream.plan.mixture import DEFAULT_BATCHING
from robostream.storage.options import ReadOptions

Weighting = Literal["proportion", "repeat", "choose"]
# options read only by the streaming dataset, and only by a mixture: given elsewhere they would be ignored
STREAMING_ONLY = ("pool_size", "decode_ahead", "prefetch_pieces", "canonical_streams", "uneven")
MIXTURE_ONLY = ("weighting", "features", "batching", "epoch_size", "sampling_method")
AugmentWhere = Literal["workers", "device"]


@dataclass
class RobostreamOptions:
    """`--robostream.*`: how robostream reads the training data (see robostream.Mixture and StreamOptions for each
    option).

    Args:
        weights: one weight per source of a mixture named by `--dataset.repo_id='[a,b,...]'` (default: equal
            proportions); their meaning is `weighting`.
        weighting: "proportion" (shares of epoch_size), "repeat" (times each source's size per epoch) or "choose"
            (samples per epoch).
        mixture: a JSON or YAML file holding the mixture instead: a list of robostream.Source arguments
            ({"repo_id" or "root", "proportion"/"repeat"/"choose", "episodes", "feature_map", "revision", ...}).
        features: "strict" (sources must match after their feature_map) or "union" (a key a source lacks is zeros
            there, with `<key>_is_pad` True).
        batching: how a mixture's sources share batches: "random", "per_stream" or "stratified".
        epoch_size: samples per epoch of a mixture weighted by proportion (default: the sources' total).
        sampling_method: a mixture's partial passes: "balanced" or "fixed".
        pool_size: live episode pieces per canonical stream (shuffle randomness vs memory).
        decode_ahead: samples of a piece whose frames are decoded together (default: by the frame size, 16 up to
            3 cameras of 256x256, else 4; camera files of one episode each: small frames up to 1 MiB ahead).
        prefetch_pieces: remote data read ahead (0: off; see StreamOptions.prefetch_pieces).
        canonical_streams: the streams an epoch is cut into (default: chosen at the first start, then kept).
        uneven: equal batch counts across ranks by "pad" (repeat a few samples) or "drop".
        cache_dir: keep whole remote data/video files on this local disk folder, shared by the node's processes
            (its `derived/` also holds the node's metadata snapshots); see robostream.ReadOptions.
        cache_limit: what the disk cache may hold (e.g. "200gb"; needed with cache_dir).
        augment_on: where `--dataset.image_transforms` run on whole batches: "workers" (uint8 batches in the
            DataLoader workers; streaming only) or "device" (float batches on the training device, after the
            transfer).
        record: append every step's loss and batch `index` values to this file (JSON lines): compare a resumed run
            with an uninterrupted one.
    """

    weights: list[float] | None = None
    weighting: Weighting = "proportion"
    mixture: str | None = None
    features: Literal["strict", "union"] = DEFAULT_FEATURES
    batching: Literal["random", "per_stream", "stratified"] = DEFAULT_BATCHING
    epoch_size: int | None = None
    sampling_method: Literal["balanced", "fixed"] = DEFAULT_SAMPLING_METHOD
    pool_size: int = DEFAULT_POOL_SIZE
    decode_ahead: int | None = None
    prefetch_pieces: int = DEFAULT_PREFETCH_PIECES
    canonical_streams: int | None = None
    uneven: Literal["pad", "drop"] = DEFAULT_UNEVEN
    cache_dir: str | None = None
    cache_limit: str | None = None
    augment_on: AugmentWhere = "workers"
    record: str | None = None


@dataclass
class RobostreamTrainConfig(TrainPipelineConfig):
    """lerobot-train's configuration with a `robostream` section (saved with it in every checkpoint's
    train_config.json, so `--resume` reads the data the same way)."""

    robostream: RobostreamOptions = field(default_factory=RobostreamOptions)

    def validate(self) -> None:
        super().validate()
        # batch 0 made every streaming epoch empty (an endless loop), a negative one a bare islice error
        finite_number(self.batch_size, what="--batch_size", integer=True, minimum=1)
        if self.robostream.mixture is not None:  # saved in train_config.json: a resume may start elsewhere
            self.robostream.mixture = str(Path(self.robostream.mixture).resolve())
        mixture = self.mixture_sources() is not None  # bad mixture flags fail before anything is built
        for names, needs, where in (
            (STREAMING_ONLY, self.dataset.streaming, "the streaming dataset: add --dataset.streaming=true"),
            (MIXTURE_ONLY, mixture, "a mixture of datasets (--dataset.repo_id='[a,b]' or --robostream.mixture)"),
        ):
            given = [
                f"--robostream.{name}={getattr(self.robostream, name)}"
                for name in names
                if getattr(self.robostream, name) != getattr(RobostreamOptions(), name)
            ]
            if given and not needs:
                raise ValueError(f"{', '.join(given)}: read only by {where}; this run would ignore it")

    def mixture_sources(self) -> list[Source] | None:
        """The mixture this config names (None: one dataset, `--dataset.repo_id` / `--dataset.root`)."""
        options = self.robostream
        if options.mixture is not None:
            if _as_list(self.dataset.repo_id, "--dataset.repo_id") is not None or options.weights is not None:
                raise ValueError(
                    f"--robostream.mixture={options.mixture} names the sources and their weights: "
                    "leave --dataset.repo_id a single name (it names the run) and --robostream.weights "
                    "unset"
                )
            given = [
                f"--dataset.{name}"
                for name in ("root", "episodes", "revision")
                if getattr(self.dataset, name) is not None
            ]
            if given:
                raise ValueError(
                    f"--robostream.mixture={options.mixture} gives each source its root, episodes and "
                    f"revision: leave {', '.join(given)} unset"
                )
            return sources_from_file(options.mixture)
        repo_ids = _as_list(self.dataset.repo_id, "--dataset.repo_id")
        if repo_ids is None:
            if options.weights is not None:
                raise ValueError(
                    f"--robostream.weights={options.weights} weighs the sources of a mixture, but "
                    f"--dataset.repo_id={self.dataset.repo_id!r} names one dataset: give a list, "
                    "e.g. --dataset.repo_id='[a,b]' --robostream.weights='[0.7,0.3]'"
                )
            return None
        roots = _as_list(self.dataset.root, "--dataset.root") if self.dataset.root is not None else None
        if self.dataset.root is not None and (roots is None or len(roots) != len(repo_ids)):
            raise ValueError(
                f"--dataset.root={self.dataset.root!r} must list one root per source of "
                f"--dataset.repo_id ({len(repo_ids)} sources)"
            )
        weights = options.weights if options.weights is not None else [1.0] * len(repo_ids)
        if len(weights) != len(repo_ids):
            raise ValueError(
                f"--robostream.weights has {len(weights)} values {weights} but --dataset.repo_id names "
                f"{len(repo_ids)} sources {repo_ids}: give one weight per source"
            )
        if self.dataset.episodes is not None:
            raise ValueError(
                "--dataset.episodes selects episodes of one dataset; give each source of a mixture its "
                "episodes in a --robostream.mixture file"
            )
        source_roots: list[str | None] = list(roots) if roots is not None else [None] * len(repo_ids)
        return [
            Source(
                repo_id=repo_id,
                root=root,
                revision=self.dataset.revision,
                **_weight_argument(options.weighting, weight),
            )
            for repo_id, root, weight in zip(repo_ids, source_roots, weights)
        ]

    def read_options(self) -> ReadOptions:
        """How the data's bytes are read, from the `--robostream.*` options that say it (the disk cache)."""
        return ReadOptions(cache_dir=self.robostream.cache_dir, cache_limit=self.robostream.cache_limit)


class WeightArgument(TypedDict, total=False):
    """The one weight argument a Source of a --dataset.repo_id list gets (`--robostream.weighting` names it)."""

    proportion: float
    repeat: float
    choose: int


def _weight_argument(weighting: Weighting, weight: float) -> WeightArgument:
    """One --robostream.weights value as the Source argument `weighting` names (choose: a whole count)."""
    if weighting == "proportion":
        return {"proportion": weight}
    if weighting == "repeat":
        return {"repeat": weight}
    if not float(weight).is_integer():
        raise ValueError(
            f"--robostream.weights: {weight!r} with --robostream.weighting=choose: expected a whole number of samples"
        )
    return {"choose": int(weight)}


def _as_list(value: str | None, flag: str) -> list[str] | None:
    """`'[a,b]'` (how draccus hands over a list given to a string field) as a list; a plain name as None."""
    if value is None or not value.strip().startswith("["):
        return None
    try:
        items = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ValueError(f"{flag}={value!r} is not a list like '[a,b]': {exc}") from exc
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        raise ValueError(f"{flag}={value!r}: expected a non-empty list of names, e.g. '[lerobot/a,lerobot/b]'")
    return items
