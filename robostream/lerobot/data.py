"""The training data: robostream's dataset and loader built from a RobostreamTrainConfig, and the metadata a
policy is made from (one dataset's, or a mixture's with its statistics aggregated).

Streaming (`--dataset.streaming=true`): StreamingLeRobotDataset + StreamingDataLoader, rank-aware by itself (no
accelerate sharding), resumable exactly on any layout from the loader's state, one dataset or a mixture.
Map-style (default, as lerobot-train): robostream's LeRobotDataset under lerobot's own EpisodeAwareSampler (its
`drop_n_last_frames`, its (seed, epoch) order, its resume arithmetic `compute_sampler_state`, accelerate's batch
sharding): lerobot's data path with our reader in it; one dataset only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from lerobot.datasets import EpisodeAwareSampler, compute_sampler_state
from lerobot.datasets.factory import resolve_delta_timestamps
from lerobot.utils.collate import lerobot_collate_fn
from lerobot.utils.constants import IMAGENET_STATS

from robostream.datasets.loader import StreamingDataLoader
from robostream.datasets.map_style import LeRobotDataset
from robostream.datasets.mixture import Mixture
from robostream.datasets.stream_options import StreamOptions
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.format.depth import is_depth_feature
from robostream.format.language import language_keys
from robostream.format.metadata import DatasetMetadata
from robostream.format.stats import aggregate_stacked
from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.eval_split import HeldOut, first_tasks, split_episodes
from robostream.storage.redact import redact_url

if TYPE_CHECKING:
    from robostream.augment import BatchImageTransforms

CORE_STATS = ("min", "max", "mean", "std")


@dataclass
class MixtureMetadata:
    """What lerobot's `make_policy`, `resolve_delta_timestamps` and processors read from a dataset's metadata
    (`features`, `stats`, `fps`, `camera_keys`), for a mixture: its features under the common names (the union of
    the sources'), and statistics aggregated as lerobot aggregates datasets' stats (count-weighted mean, pooled
    variance, min of mins, max of maxes, count-weighted quantiles), each source counted with the samples it
    contributes to an epoch (its weight), not with the frames it holds."""

    features: dict[str, dict[str, Any]]
    stats: dict[str, dict[str, np.ndarray]]
    fps: int | float
    camera_keys: list[str]

    @classmethod
    def of(cls, dataset: StreamingLeRobotDataset) -> MixtureMetadata:
        features: dict[str, dict[str, Any]] = {}
        for reader in dataset.sources:
            for key, spec in reader.meta.features.items():
                features.setdefault(reader.rename.get(key, key), spec)
        stats = mixture_stats([reader.stats for reader in dataset.sources], dataset.samples_per_source)
        return cls(
            features=features,
            stats=stats,
            fps=dataset.sources[0].meta.fps,
            camera_keys=[k for k, f in features.items() if f["dtype"] in ("video", "image")],
        )


def mixture_stats(
    per_source: list[dict[str, dict[str, np.ndarray]]], samples: list[int]
) -> dict[str, dict[str, np.ndarray]]:
    """Each feature's statistics over the sources that have it, weighted by the samples each gives per epoch.

    Args:
        per_source: each source's stats (meta/stats.json) under the mixture's names.
        samples: each source's samples per epoch.
    """
    stacked: dict[str, dict[str, np.ndarray]] = {}
    for key in dict.fromkeys(k for stats in per_source for k in stats):
        parts = [(stats[key], n) for stats, n in zip(per_source, samples) if key in stats and n > 0]
        if not parts or not all(all(s in p for s in CORE_STATS) for p, _ in parts):
            continue  # nothing to aggregate; a policy that normalises the key is refused by check_stats
        names = [s for s in parts[0][0] if s != "count" and all(s in p for p, _ in parts)]
        stacked[key] = {s: np.stack([np.asarray(p[s], dtype=np.float64) for p, _ in parts]) for s in names}
        stacked[key]["count"] = np.array([[n] for _, n in parts], dtype=np.int64)
    return aggregate_stacked(stacked)


def image_keys(meta: DatasetMetadata | MixtureMetadata) -> list[str]:
    """The cameras but depth maps: those lerobot augments and normalises with ImageNet's stats."""
    return [key for key in meta.camera_keys if not is_depth_feature(meta.features[key])]


def use_imagenet_stats(meta: DatasetMetadata | MixtureMetadata) -> None:
    """lerobot's `--dataset.use_imagenet_stats` (its default): every camera but depth maps normalised with
    ImageNet's mean and std instead of the dataset's (a pretrained backbone expects them); in place."""
    for key in image_keys(meta):
        meta.stats[key] = {
            **meta.stats.get(key, {}),
            **{name: np.asarray(value, dtype=np.float32) for name, value in IMAGENET_STATS.items()},
        }


def check_stats(policy_config: Any, stats: dict[str, dict[str, np.ndarray]], rename_map: dict[str, str]) -> None:
    """lerobot's normaliser passes a feature without stats through unnormalised, silently: refuse instead (for
    the features the policy normalises: not those of an IDENTITY mode; a renamed feature under either name)."""
    from lerobot.configs.types import NormalizationMode

    features = {**policy_config.input_features, **policy_config.output_features}
    renamed_from = {new: old for old, new in (rename_map or {}).items()}
    missing = [
        k
        for k, feature in features.items()
        if policy_config.normalization_mapping.get(
            getattr(feature.type, "value", feature.type), NormalizationMode.IDENTITY
        )
        != NormalizationMode.IDENTITY
        and k not in stats
        and renamed_from.get(k) not in stats
    ]
    if missing:
        raise ValueError(
            f"the dataset's meta/stats.json has no statistics for {missing}, which the policy "
            "normalises: compute them (robostream convert writes them) or pick other features"
        )


@dataclass
class Evaluation:
    """The held-out episodes (`--dataset.eval_split`) and their loader for the eval loss: the same kind of loader
    as training's, without augmentations; map-style: lerobot's (in order, `--max_eval_samples` as lerobot's
    per-task subset), streaming: every held-out sample once per pass (of each source, whatever its training
    weight), in the order of epoch 0 every time."""

    held_out: HeldOut  # per source
    # map-style: torch's over the held-out frames (accelerate's once prepared); streaming: robostream's
    loader: StreamingDataLoader | torch.utils.data.DataLoader


@dataclass
class TrainingData:
    """The dataset, its loader and what the policy is made from."""

    dataset: StreamingLeRobotDataset | LeRobotDataset
    # streaming: robostream's; map-style: torch's over lerobot's sampler, accelerate's once prepared for training
    loader: StreamingDataLoader | torch.utils.data.DataLoader
    meta: DatasetMetadata | MixtureMetadata
    delta_timestamps: dict[str, list[float]]
    sampler: EpisodeAwareSampler | None  # map-style only
    device_augment: BatchImageTransforms | None  # augmentations run on the device (else none, or in the workers)
    evaluation: Evaluation | None = None  # with --dataset.eval_split

    @property
    def held_out(self) -> HeldOut | None:
        """The episodes each source holds out (recorded in checkpoints); None without an eval split."""
        return self.evaluation.held_out if self.evaluation is not None else None

    @property
    def streaming(self) -> bool:
        return isinstance(self.dataset, StreamingLeRobotDataset)

    @property
    def num_frames(self) -> int:
        if isinstance(self.dataset, StreamingLeRobotDataset):
            return int(sum(self.dataset.samples_per_source))
        return len(self.dataset)

    @property
    def num_episodes(self) -> int:
        if isinstance(self.dataset, StreamingLeRobotDataset):
            return sum(len(r.episodes) for r in self.dataset.sources)
        return len(self.dataset.episodes)


def make_training_data(cfg: RobostreamTrainConfig, *, device: torch.device, policy_config: Any) -> TrainingData:
    """Open the dataset (or mixture) of `cfg`, then its loader with the windows `policy_config` needs, and the
    augmentations of `--dataset.image_transforms` on whole batches where `--robostream.augment_on` puts them.

    Args:
        cfg: the validated training config.
        device: the training device (pinned memory for CUDA).
        policy_config: the policy's config (its delta indices decide the windows).
    """
    if not cfg.dataset.streaming and cfg.dataset.image_transforms.enable and cfg.robostream.augment_on == "workers":
        raise ValueError(
            "--robostream.augment_on=workers augments the batches a streaming loader assembles: add "
            "--dataset.streaming=true, or use --robostream.augment_on=device"
        )
    return _streaming(cfg, device, policy_config) if cfg.dataset.streaming else _map_style(cfg, device, policy_config)


def _augment(cfg: RobostreamTrainConfig, camera_keys: list[str]) -> BatchImageTransforms | None:
    transforms = cfg.dataset.image_transforms
    if not transforms.enable:
        return None
    from robostream.augment import BatchImageTransforms

    return BatchImageTransforms(transforms, seed=cfg.seed or 0, camera_keys=camera_keys)


VIDEO_BACKENDS = ("torchcodec", "pyav")


def own_generator(cfg: RobostreamTrainConfig) -> torch.Generator:
    """The loader's own generator: torch's DataLoader draws a seed from its generator at every iter(), which would
    otherwise advance the global RNG that dropout and noise use; a resumed run calls iter() at another step than
    the run it continues, and would diverge from there (lerobot-train's loader does, measured: step 5's loss)."""
    return torch.Generator().manual_seed(cfg.seed or 0)


def _streaming(cfg: RobostreamTrainConfig, device: torch.device, policy_config: Any) -> TrainingData:
    options = cfg.robostream
    sources = cfg.mixture_sources()
    single: dict[str, Any] = (
        {}
        if sources is not None
        else dict(
            repo_id=cfg.dataset.repo_id,
            root=cfg.dataset.root,
            revision=cfg.dataset.revision,
            episodes=cfg.dataset.episodes,
        )
    )
    mixture = (
        Mixture(
            sources=sources,
            features=options.features,
            batching=options.batching,
            epoch_size=options.epoch_size,
            sampling_method=options.sampling_method,
            # the planned batch of per_stream/stratified; random batches are the loader's alone
            batch_size=None if options.batching == "random" else cfg.batch_size,
        )
        if sources is not None
        else None
    )
    common = dict(
        seed=cfg.seed or 0,
        return_uint8=True,
        tolerance_s=cfg.tolerance_s,
        depth_output_unit=cfg.dataset.depth_output_unit,
        video_backend=cfg.dataset.video_backend,
        streams=StreamOptions(
            pool_size=options.pool_size,
            decode_ahead=options.decode_ahead,
            prefetch_pieces=options.prefetch_pieces,
            canonical_streams=options.canonical_streams,
            uneven=options.uneven,
        ),
        read_options=cfg.read_options(),
    )
    # The windows depend on the dataset's features and fps, the split on its episodes' tasks: open it once without
    # either to find them (metadata only: the node cache makes the later constructions cheap), as lerobot resolves
    # the windows from ds_meta.
    try:
        probe = StreamingLeRobotDataset(**single, mixture=mixture, **common)
    except ValueError as exc:
        if sources is not None:
            exc.add_note(
                "on the command line: a --robostream.mixture file gives each source its feature_map "
                "(and episodes, revision, weight); --robostream.features=union fills missing keys"
            )
        raise
    delta_timestamps = (
        resolve_delta_timestamps(policy_config, MixtureMetadata.of(probe) if mixture is not None else probe.meta) or {}
    )
    chosen = [s.episodes for s in mixture.sources] if mixture is not None else [cfg.dataset.episodes]
    split = _split(cfg, [(reader.meta, given, reader.label) for reader, given in zip(probe.sources, chosen)])
    train_args, eval_args = dict(single, mixture=mixture), None
    if split is not None:
        train, held_out = split
        if mixture is None:
            train_args["episodes"], eval_args = train[0], dict(single, episodes=held_out[0])
        else:
            train_args["mixture"] = dataclasses.replace(
                mixture, sources=[dataclasses.replace(s, episodes=e) for s, e in zip(mixture.sources, train)]
            )
            # every held-out sample once per pass, whatever the source's training weight
            eval_sources = [
                dataclasses.replace(s, episodes=e, proportion=None, repeat=1.0, choose=None)
                for s, e in zip(mixture.sources, held_out)
            ]
            eval_mixture = Mixture(sources=eval_sources, features=options.features)
            eval_args = dict(mixture=eval_mixture)
    dataset = StreamingLeRobotDataset(**train_args, **common, delta_timestamps=delta_timestamps)
    meta = MixtureMetadata.of(dataset) if mixture is not None else dataset.meta  # counted with the training episodes
    if cfg.dataset.use_imagenet_stats:
        use_imagenet_stats(meta)
    augment = _augment(cfg, image_keys(meta))
    in_workers = augment is not None and options.augment_on == "workers"
    loader = _streaming_loader(cfg, dataset, device, augment if in_workers else None)
    if cfg.persistent_workers and cfg.num_workers:
        logging.info(
            "--persistent_workers does not apply to streaming: its workers start with each pass (the "
            "pass's epoch and resume position are theirs)"
        )
    evaluation = None
    if split is not None and eval_args is not None:
        eval_dataset = StreamingLeRobotDataset(**eval_args, **common, delta_timestamps=delta_timestamps)
        evaluation = Evaluation(split[1], _streaming_loader(cfg, eval_dataset, device, None))
    return TrainingData(
        dataset,
        loader,
        meta,
        delta_timestamps,
        sampler=None,
        device_augment=None if in_workers else augment,
        evaluation=evaluation,
    )


def _streaming_loader(
    cfg: RobostreamTrainConfig,
    dataset: StreamingLeRobotDataset,
    device: torch.device,
    batch_transform: BatchImageTransforms | None,
) -> StreamingDataLoader:
    return StreamingDataLoader(
        dataset,
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        pin_memory=device.type == "cuda",
        batch_transform=batch_transform,
        prefetch_factor=cfg.prefetch_factor if cfg.num_workers else None,
        multiprocessing_context=cfg.dataloader_multiprocessing_context if cfg.num_workers else None,
        generator=own_generator(cfg),
    )


def _split(
    cfg: RobostreamTrainConfig, sources: list[tuple[DatasetMetadata, Sequence[int] | None, str]]
) -> tuple[HeldOut, HeldOut] | None:
    """lerobot's eval split of each source ((metadata, the episodes chosen or None for all, its name)): the
    training and the held-out episodes per source; None without `--dataset.eval_split`."""
    if cfg.dataset.eval_split == 0:
        return None
    train: HeldOut = []
    held_out: HeldOut = []
    for meta, chosen, name in sources:
        # in the order chosen (lerobot groups them in that order), each once
        episodes = list(dict.fromkeys(chosen)) if chosen is not None else meta.episodes.episode_index.tolist()
        kept, out = split_episodes(
            episodes=episodes, first_tasks=first_tasks(meta), eval_split=cfg.dataset.eval_split, where=name
        )
        train.append(kept)
        held_out.append(out)
    logging.info(
        f"train/eval split (--dataset.eval_split={cfg.dataset.eval_split}): "
        + "; ".join(f"{name}: {len(t)} train, {len(h)} eval" for (_, _, name), t, h in zip(sources, train, held_out))
    )
    return train, held_out


def _map_style(cfg: RobostreamTrainConfig, device: torch.device, policy_config: Any) -> TrainingData:
    if cfg.mixture_sources() is not None:
        raise ValueError("a mixture of datasets is read by the streaming dataset: add --dataset.streaming=true")
    open_args = dict(
        repo_id=cfg.dataset.repo_id,
        root=cfg.dataset.root,
        revision=cfg.dataset.revision,
        episodes=cfg.dataset.episodes,
        tolerance_s=cfg.tolerance_s,
        return_uint8=True,
        depth_output_unit=cfg.dataset.depth_output_unit,
        video_backend=cfg.dataset.video_backend,
        read_options=cfg.read_options(),
    )
    meta = LeRobotDataset(**open_args).meta
    if cfg.dataset.use_imagenet_stats:
        use_imagenet_stats(meta)
    delta_timestamps = resolve_delta_timestamps(policy_config, meta) or {}
    split = _split(cfg, [(meta, cfg.dataset.episodes, redact_url(meta.root))])
    if split is not None:
        open_args["episodes"] = split[0][0]
    dataset = LeRobotDataset(**open_args, delta_timestamps=delta_timestamps)
    ends = np.cumsum(dataset.lengths)  # our index i is the i-th frame of the selected episodes
    sampler = EpisodeAwareSampler(
        (ends - dataset.lengths).tolist(),
        ends.tolist(),
        drop_n_last_frames=getattr(policy_config, "drop_n_last_frames", 0),
        shuffle=True,
        seed=cfg.seed if cfg.seed is not None else 0,
    )
    # lerobot-train's collate where the dataset has language columns (default_collate fails on their rows; lerobot's
    # drops them from the batch), torch's default elsewhere.
    collate_fn = lerobot_collate_fn if language_keys(meta.info.features) else None
    workers = dict(
        num_workers=cfg.num_workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=cfg.prefetch_factor if cfg.num_workers else None,
        multiprocessing_context=cfg.dataloader_multiprocessing_context if cfg.num_workers else None,
        persistent_workers=cfg.persistent_workers and cfg.num_workers > 0,
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        generator=own_generator(cfg),
        **workers,
    )
    evaluation = None
    if split is not None:
        eval_dataset = LeRobotDataset(**{**open_args, "episodes": split[1][0]}, delta_timestamps=delta_timestamps)
        eval_loader = torch.utils.data.DataLoader(
            lerobot_eval_subset(eval_dataset, cfg.max_eval_samples),
            batch_size=cfg.batch_size,
            shuffle=False,
            collate_fn=collate_fn,
            **workers,
        )
        evaluation = Evaluation(split[1], eval_loader)
    return TrainingData(
        dataset,
        loader,
        meta,
        delta_timestamps,
        sampler=sampler,
        device_augment=_augment(cfg, image_keys(meta)),
        evaluation=evaluation,
    )


def lerobot_eval_subset(dataset: LeRobotDataset, max_samples: int) -> torch.utils.data.Dataset:
    """lerobot-train's `--max_eval_samples` (0: every held-out frame): max_samples // tasks frames of each task (by
    frame `task_index`, at least one), the first ones in the dataset's order."""
    if max_samples <= 0:
        return dataset
    task_of_frame = np.concatenate([dataset.rows.episode(e).columns["task_index"] for e in dataset.episodes])
    tasks = sorted(set(task_of_frame.tolist()))
    per_task = max(1, max_samples // len(tasks))
    selected = [i for t in tasks for i in np.flatnonzero(task_of_frame == t)[:per_task].tolist()]
    return torch.utils.data.Subset(dataset, selected)


def resume_sampler(data: TrainingData, *, step: int, batch_size: int, num_processes: int) -> dict[str, int]:
    """Map-style: position lerobot's sampler after `step` steps (lerobot's arithmetic: exact on the layout and
    batch size that wrote the checkpoint)."""
    if data.sampler is None:
        raise ValueError(
            "resume_sampler positions lerobot's sampler of a map-style run; a streaming run resumes from its "
            "loader's state (StreamingDataLoader.load_state_dict)"
        )
    state = compute_sampler_state(step, len(data.sampler), batch_size, num_processes)
    data.sampler.load_state_dict(state)
    return state
