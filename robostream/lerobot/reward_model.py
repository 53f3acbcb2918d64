"""Reward-model training (`--reward_model.*`) as lerobot-train trains them: lerobot's `make_reward_model` and
`make_reward_pre_post_processors` given the training data's stats and metadata, its optimizer preset (the reward
model's), its update step and checkpoint layout; only the data is robostream's.

Trainable here: lerobot's reward classifier (`--reward_model.type=reward_classifier`: an image classifier on a
pretrained encoder, `--reward_model.model_name`, loaded with transformers' AutoModel; its labels are the dataset's
`next.reward` column) and any trainable reward model whose inputs are the dataset's features. Refused, naming the flag
and why: SARM (its targets come from lerobot's own episode metadata), zero-shot models (robometer, topreward: nothing
to train), PEFT, `--env.*` and FSDP (see each message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lerobot.utils.constants import OBS_IMAGE, REWARD

if TYPE_CHECKING:
    from lerobot.configs.rewards import RewardModelConfig

    from robostream.format.metadata import DatasetMetadata
    from robostream.lerobot.config import RobostreamTrainConfig
    from robostream.lerobot.data import MixtureMetadata

# SARM reads lerobot's own dataset metadata (rewards/sarm/processor_sarm.py: its meta/episodes table as a
# `datasets.Dataset`, with the subtask annotation columns, indexed by episode position; modeling_sarm.py:
# temporal_proportions_*.json under a local `meta/` folder); robostream's metadata keeps the locating columns only,
# remote roots have no local folder and a mixture no single episode table.
SARM_REFUSED = (
    "--reward_model.type=sarm is not supported here: SARM's targets come from lerobot's own episode metadata "
    "(meta/episodes' subtask annotation columns, meta/temporal_proportions_*.json in a local folder), which "
    "robostream's datasets do not carry: train SARM with lerobot-train, then weigh this run's samples by its "
    "progress (--sample_weighting.type=rabc)"
)
# lerobot's save_checkpoint hands the gathered full state to `save_pretrained(state_dict=...)`, which a reward model
# (PreTrainedRewardModel: HubMixin's save_pretrained) drops, writing the main process's shards instead.
SHARDED_REFUSED = (
    "--reward_model.* under FSDP is not supported: lerobot saves a reward model from its own state_dict "
    "(PreTrainedRewardModel.save_pretrained drops the gathered full state), which under FSDP is the main "
    "process's shard; train the reward model without --use_fsdp (DDP)"
)


def refusals(cfg: RobostreamTrainConfig) -> list[tuple[bool, str]]:
    """The reward-model runs refused before anything is built: (whether this run is one, why), for
    `refuse_unsupported`."""
    config = cfg.reward_model
    if config is None:
        return []
    return [
        (config.type == "sarm", SARM_REFUSED),
        (
            cfg.peft is not None,
            "--peft.* with --reward_model.*: PEFT adapts policies only (lerobot-train refuses it: "
            "'PEFT is only supported for policy training')",
        ),
        (
            cfg.env is not None,
            "--env.* with --reward_model.*: evaluation in simulation runs a policy's actions (lerobot's "
            "eval_policy_all); a reward model has none: train it without --env.*",
        ),
    ]


def make_reward_model(*, config: RewardModelConfig, meta: DatasetMetadata | MixtureMetadata) -> Any:
    """lerobot-train's reward model: `make_reward_model` with the data's stats and metadata (a checkpoint's
    weights on resume, `config.pretrained_path`), after checking that it trains and that the dataset holds its
    inputs (the encoder is loaded only then).

    Args:
        config: `--reward_model.*`.
        meta: the training data's metadata (features, stats).

    Raises:
        ValueError: a zero-shot model, or inputs the dataset lacks.
    """
    from lerobot.rewards import make_reward_model as lerobots_make_reward_model
    from lerobot.rewards.factory import get_reward_model_class
    from lerobot.rewards.pretrained import PreTrainedRewardModel

    # lerobot's PreTrainedRewardModel.is_trainable, asked of the class: lerobot-train builds the model first, which
    # for the zero-shot ones loads a VLM of several GB only to refuse it
    if get_reward_model_class(config.type).forward is PreTrainedRewardModel.forward:
        raise ValueError(
            f"--reward_model.type={config.type} is a zero-shot reward model and cannot be trained (lerobot-train "
            "refuses it too): use it directly for inference via compute_reward() (e.g. offline precompute)"
        )
    check_inputs(config=config, meta=meta)
    return lerobots_make_reward_model(cfg=config, dataset_stats=meta.stats, dataset_meta=meta)


def make_reward_processors(*, config: RewardModelConfig, meta: DatasetMetadata | MixtureMetadata) -> tuple[Any, Any]:
    """lerobot-train's reward-model processors (`make_reward_pre_post_processors`), normalised with the data's
    stats on every run: lerobot 0.6.1 leaves them out on resume as it does for a policy, whose processors it
    loads from the checkpoint; a reward model's are always made anew, so the resumed run would normalise with no
    stats at all.

    Args:
        config: `--reward_model.*`.
        meta: the training data's metadata (stats; SARM's processor would read its episodes).
    """
    from lerobot.rewards import make_reward_pre_post_processors

    return make_reward_pre_post_processors(config, dataset_stats=meta.stats, dataset_meta=meta)


def check_inputs(*, config: RewardModelConfig, meta: DatasetMetadata | MixtureMetadata) -> None:
    """The dataset holds what the reward model reads (else a KeyError or a shape error at the first step): its
    input features; for the classifier, a camera (`validate_features`), one per `--reward_model.num_cameras`, and
    its labels `next.reward`.

    Raises:
        ValueError: naming the flag or the feature, and what to do.
    """
    missing = [key for key in config.input_features if key not in meta.features]
    if not config.input_features or missing:
        raise ValueError(
            f"--reward_model.input_features: {missing or 'none given'} not among the dataset's features "
            f"{sorted(meta.features)}: name the ones it reads, e.g. --reward_model.input_features="
            '\'{"observation.images.top": {"type": "VISUAL", "shape": [3, 128, 128]}}\''
        )
    if config.type != "reward_classifier":
        return
    config.validate_features()
    cameras = [key for key in config.input_features if key.startswith(OBS_IMAGE)]
    if len(cameras) != config.num_cameras:
        raise ValueError(
            f"--reward_model.num_cameras={config.num_cameras} but --reward_model.input_features names "
            f"{len(cameras)} camera(s) {cameras}: the classifier's head takes one embedding per camera; make "
            "them agree"
        )
    if REWARD not in meta.features:
        raise ValueError(
            f"the reward classifier learns from the dataset's {REWARD!r} column (1 success, 0 not), which this "
            f"dataset does not have (features: {sorted(meta.features)}): record it (lerobot's gym_manipulator "
            "does), or pick a dataset that has it"
        )
