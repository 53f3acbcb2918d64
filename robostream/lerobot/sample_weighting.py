"""`--sample_weighting.*`: lerobot-train's per-sample loss weights over robostream's data.

The weighter is lerobot's (`make_sample_weighter`: RA-BC from each frame's task progress, or uniform) and so is the
weighted loss (`update_policy`'s sum of weight x per-sample loss over the sum of the weights). What differs is where
RA-BC's progress values are read from: the `sarm_progress.parquet` at the dataset's root (or
`--sample_weighting.progress_path`) through robostream's storage, so a remote root (hf://, s3://, http(s)://) is
read with the user's credentials, as the dataset is; lerobot reads a local path or downloads from the Hub. The
file is keyed by the dataset's global `index` column (with `episode_index` for the episode bounds), which every
robostream batch carries.

A mixture weighs each source with lerobot's weighter over that source's own progress file, its weights normalised
over its own samples of the batch (lerobot normalises a batch's weights to sum to its size): each source keeps its
share of the loss (the mixture's weights), RA-BC reweighs within it.
"""

from __future__ import annotations

import dataclasses
import inspect
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lerobot.utils.sample_weighting import SampleWeighter, SampleWeightingConfig, make_sample_weighter

from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.storage.options import ReadOptions
from robostream.storage.store import Storage

if TYPE_CHECKING:
    from robostream.lerobot.data import TrainingData

PROGRESS_FILE = "sarm_progress.parquet"  # lerobot's name at the dataset root (utils/sample_weighting.py)


def make_weighter(
    *,
    config: SampleWeightingConfig | None,
    data: TrainingData,
    policy: Any,
    device: torch.device,
    read_options: ReadOptions,
) -> SampleWeighter | None:
    """lerobot's weighter for `--sample_weighting.*` (None without it), its inputs read through robostream.

    Args:
        config: `cfg.sample_weighting`.
        data: the training data (where each source's progress file is).
        policy: the policy, before accelerate wraps it (its forward must give per-sample losses; RA-BC reads its
            chunk_size).
        device: where the weights go (the training device).
        read_options: how a progress file given by URL is read (the run's `--robostream.*` reading options).

    Raises:
        ValueError: the policy has no per-sample loss, or a mixture is given one progress_path.
        FileNotFoundError: a progress file is missing (naming it).
    """
    if config is None:
        return None
    check_per_sample_loss(policy, config)
    if config.type != "rabc":  # reads nothing from the dataset (an unknown type: lerobot's error)
        return make_sample_weighter(config, policy, device)
    sources = data.dataset.sources if isinstance(data.dataset, StreamingLeRobotDataset) else [data.dataset]
    if config.progress_path is not None and len(sources) > 1:
        raise ValueError(
            f"--sample_weighting.progress_path={config.progress_path} is one file keyed by one dataset's `index`; "
            f"each of the mixture's {len(sources)} sources reads the {PROGRESS_FILE} at its own root: leave "
            "--sample_weighting.progress_path unset"
        )
    weighters = []
    for source in sources:
        storage, name = (
            _storage_of(config.progress_path, read_options)
            if config.progress_path is not None
            else (source.meta.storage, PROGRESS_FILE)
        )
        weighters.append(_rabc_weighter(config, policy, device, storage, name))
    return weighters[0] if len(weighters) == 1 else SourceWeights(weighters)


def check_per_sample_loss(policy: Any, config: SampleWeightingConfig) -> None:
    """lerobot's weighted loss calls `policy.forward(batch, reduction="none")`; a policy without that argument
    would fail at the first step with a bare TypeError."""
    parameters = inspect.signature(policy.forward).parameters
    if "reduction" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    raise ValueError(
        f"--sample_weighting.type={config.type} weighs each sample's loss: lerobot asks the policy for per-sample "
        f"losses (forward(batch, reduction='none'), e.g. pi0, pi05, smolvla), and {type(policy).__name__}.forward "
        "has no `reduction`: train this policy without --sample_weighting"
    )


def _storage_of(path: str, read_options: ReadOptions) -> tuple[Storage, str]:
    """A progress file given by path or URL as (the storage of its folder, its name)."""
    if "://" not in path:
        local = Path(path).resolve()
        return Storage(local.parent, read_options), local.name
    folder, _, name = path.rpartition("/")
    return Storage(folder, read_options), name


def _rabc_weighter(
    config: SampleWeightingConfig, policy: Any, device: torch.device, storage: Storage, name: str
) -> SampleWeighter:
    """lerobot's RA-BC weighter over the progress file `name` of `storage`: lerobot reads it with pandas from a
    local path (whole, in its constructor), so a remote file is copied to a scratch file first."""
    where = storage.describe(name)
    if not storage.exists(name):
        raise FileNotFoundError(
            f"{where} not found: --sample_weighting.type=rabc weighs each frame by its task progress from this "
            "file (columns index, episode_index, progress_sparse/progress_dense); compute it with "
            "`python -m lerobot.rewards.sarm.compute_rabc_weights`, or name it with --sample_weighting.progress_path"
        )
    opened = storage.open(name)
    if isinstance(opened, str):  # a local file
        return make_sample_weighter(dataclasses.replace(config, progress_path=opened), policy, device)
    with tempfile.TemporaryDirectory(prefix="robostream-progress-") as scratch:
        local = Path(scratch) / PROGRESS_FILE
        with opened, local.open("wb") as copy:
            shutil.copyfileobj(opened, copy)
        return make_sample_weighter(dataclasses.replace(config, progress_path=str(local)), policy, device)


class SourceWeights(SampleWeighter):
    """A mixture's weights: each sample weighed by its source's weighter (`dataset_index`), normalised over that
    source's samples of the batch. Batch stats: counts (`num_*`) summed, the rest averaged over the samples."""

    def __init__(self, weighters: list[SampleWeighter]) -> None:
        self.weighters = weighters

    def compute_batch_weights(self, batch: dict) -> tuple[torch.Tensor, dict]:
        sources, indices = batch["dataset_index"], batch["index"]
        weights: torch.Tensor | None = None
        totals: dict[str, float] = {}
        for source, weighter in enumerate(self.weighters):
            chosen = torch.nonzero(sources == source).flatten()
            if len(chosen) == 0:
                continue
            part, stats = weighter.compute_batch_weights({"index": indices[chosen]})
            if weights is None:
                weights = torch.zeros(len(indices), dtype=part.dtype, device=part.device)
            weights[chosen.to(part.device)] = part
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + (value if key.startswith("num_") else value * len(chosen))
        assert weights is not None  # every sample comes from a source
        return weights, {k: v if k.startswith("num_") else v / len(indices) for k, v in totals.items()}

    def get_stats(self) -> dict:
        return {
            f"source_{i}/{k}": v for i, weighter in enumerate(self.weighters) for k, v in weighter.get_stats().items()
        }


@dataclasses.dataclass
class BatchWeights(SampleWeighter):
    """One batch's weights, computed from the batch as the loader gave it (lerobot's preprocessor drops a
    mixture's `dataset_index`), handed to lerobot's `update_policy` as the weighter it calls."""

    weights: torch.Tensor
    stats: dict

    def compute_batch_weights(self, batch: dict) -> tuple[torch.Tensor, dict]:
        return self.weights, self.stats

    def get_stats(self) -> dict:
        return self.stats


def batch_weights(weighter: SampleWeighter | None, batch: dict[str, Any]) -> BatchWeights | None:
    """`weighter`'s weights of `batch` (before the preprocessor) for `update_policy`; None without weighting."""
    return BatchWeights(*weighter.compute_batch_weights(batch)) if weighter is not None else None
