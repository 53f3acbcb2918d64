"""lerobot-train with robostream underneath: `python -m robostream.lerobot.train` (or `robostream train`) takes
lerobot 0.6's flags and trains with them; only the data side is robostream's.

    python -m robostream.lerobot.train --policy.type=act --dataset.repo_id=lerobot/aloha_sim_insertion_human \\
        --dataset.streaming=true --batch_size=8 --steps=100000 --output_dir=outputs/act
    # a weighted mixture (streaming), and exact resume from the last checkpoint:
    python -m robostream.lerobot.train --policy.type=diffusion --dataset.repo_id='[a/x,b/y]' \\
        --robostream.weights='[0.7,0.3]' --dataset.streaming=true --output_dir=outputs/mix
    python -m robostream.lerobot.train --resume=true \\
        --config_path=outputs/mix/checkpoints/last/pretrained_model/train_config.json
    # several GPUs: accelerate launch --num_processes 8 -m robostream.lerobot.train ...

lerobot's own pieces, used as lerobot-train uses them: the config and its parser (draccus; `--help` lists every
flag), `make_policy`, the pre/post processors (stats from the dataset on a fresh run, from the checkpoint on
resume), the optimizer/scheduler presets, accelerate (device, mixed precision from the policy, DDP), its training
step (`update_policy`: autocast, backward, gradient clipping, optimizer and scheduler step), its metrics and wandb
logging, its checkpoint layout, push_to_hub at the end. Kept from lerobot-train's loop: uint8 cameras become float
in [0, 1] after the loader (here on the device), and map-style reading uses lerobot's EpisodeAwareSampler with the
policy's `drop_n_last_frames`.

Different: the dataset (robostream's LeRobotDataset, or StreamingLeRobotDataset with `--dataset.streaming=true`:
one dataset or a mixture, local or remote, exactly resumable on any layout); `--dataset.image_transforms` run on
whole batches (robostream.augment: lerobot's distribution, per-sample parameters, deterministic per (seed, epoch,
sample)); streaming ignores `drop_n_last_frames` (as lerobot's streaming dataset does). `--dataset.eval_split`
holds out lerobot's episodes (robostream/lerobot/eval_split.py) on map-style, streaming and mixtures alike (each
source split on its own), recorded in the checkpoints; the eval loss every `--eval_steps` as lerobot-train computes
and logs it (streaming: `--max_eval_samples` as whole batches of the held-out stream, see `eval_batches`).
`--sample_weighting.*` weighs each sample's loss with lerobot's weighter and update_policy, RA-BC's progress file
read through robostream's storage (each source's own in a mixture: robostream/lerobot/sample_weighting.py).
Sharded models (`accelerate launch --use_fsdp`, FSDP1) as lerobot-train shards them: every rank gathers the full
weights and optimizer state for each checkpoint (lerobot's gather_fsdp_state_dicts; the main process writes them in
lerobot's layout), and a resumed run loads the optimizer state after `prepare`, resharded to its processes
(load_fsdp_optimizer_state); the data position resumes as without sharding. Evaluation in a simulation env
(`--env.*`, `--env_eval_freq`, `--eval.*`) as lerobot-train evaluates, with lerobot's env factory and
eval_policy_all, on the main process at its steps (robostream/lerobot/env_eval.py: its random state put back after,
so training goes on as without it). Reward models (`--reward_model.*`, e.g. the reward classifier) train as
lerobot-train trains them (robostream/lerobot/reward_model.py). Not supported (refused): SARM, zero-shot reward
models and a reward model with PEFT, an env or FSDP (reward_model.py says why), HF Jobs, --save_checkpoint_to_hub,
--eval.recording, FSDP2, FSDP without use_orig_params, DeepSpeed and Megatron-LM (SHARDING_REFUSED says why);
env_eval refuses lerobot's async envs made by gym id and an env with FSDP.
"""

import dataclasses
import itertools
import json
import logging
import math
import time
from collections.abc import Iterable, Iterator
from pprint import pformat
from typing import TYPE_CHECKING, Any

import torch
from lerobot.common.train_utils import (
    gather_fsdp_state_dicts,
    load_fsdp_optimizer_state,
    load_training_batch_size,
    load_training_num_processes,
    should_save_checkpoint,
)
from lerobot.common.wandb_utils import WandBLogger
from lerobot.configs import parser
from lerobot.optim.factory import make_optimizer_and_scheduler
from lerobot.policies import make_policy, make_pre_post_processors
from lerobot.scripts.lerobot_train import update_policy
from lerobot.utils.import_utils import register_third_party_plugins
from lerobot.utils.logging_utils import AverageMeter, MetricsTracker
from lerobot.utils.random_utils import set_seed
from lerobot.utils.utils import init_logging

from robostream.datasets.loader import StreamingDataLoader
from robostream.datasets.streaming import StreamingLeRobotDataset
from robostream.lerobot import checkpoint
from robostream.lerobot.checkpoint import Position
from robostream.lerobot.config import RobostreamTrainConfig
from robostream.lerobot.data import (
    VIDEO_BACKENDS,
    Evaluation,
    TrainingData,
    check_stats,
    make_training_data,
    resume_sampler,
)
from robostream.lerobot.env_eval import evaluate_in_env, is_env_eval_step, make_env_evaluation
from robostream.lerobot.eval_split import check_recorded
from robostream.lerobot.reward_model import SHARDED_REFUSED, make_reward_model, make_reward_processors
from robostream.lerobot.reward_model import refusals as reward_model_refusals
from robostream.lerobot.sample_weighting import batch_weights, make_weighter

if TYPE_CHECKING:
    from robostream.augment import BatchImageTransforms


def make_accelerator(cfg: RobostreamTrainConfig) -> Any:
    """lerobot-train's Accelerator: CPU when the policy's device is, mixed precision from the policy's dtype (or
    use_amp), DDP with unused parameters allowed, the scheduler stepped once per optimisation step."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    policy = cfg.trainable_config
    dtype_name = getattr(policy, "dtype", None)
    mixed_precision = (
        {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}.get(dtype_name)
        if isinstance(dtype_name, str)
        else None
    )
    if not hasattr(policy, "dtype") and getattr(policy, "use_amp", False):
        dtype = torch.get_autocast_dtype(torch.device(policy.device).type)
        mixed_precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    return Accelerator(
        step_scheduler_with_optimizer=False,
        mixed_precision=mixed_precision,
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
        cpu=policy.device == "cpu",
    )


def refuse_unsupported(cfg: RobostreamTrainConfig) -> None:
    for wanted, why in (
        *reward_model_refusals(cfg),
        (
            cfg.eval.recording,
            "--eval.recording records rollouts as a dataset, which lerobot-train's evaluation during training "
            "does not do: run lerobot-eval --eval.recording=true --policy.path=.../pretrained_model",
        ),
        (cfg.job.is_remote, "--job.target runs on HF Jobs: not supported here"),
        (
            cfg.save_checkpoint_to_hub,
            "--save_checkpoint_to_hub is not supported here: push the final policy with --policy.push_to_hub",
        ),
        (
            cfg.dataset.video_backend not in VIDEO_BACKENDS,
            f"--dataset.video_backend={cfg.dataset.video_backend!r}: choose one of {VIDEO_BACKENDS}",
        ),
    ):
        if wanted:
            raise ValueError(f"robostream's training command: {why}")


# lerobot-train's sharded path is FSDP1's alone (train_utils.gather_fsdp_state_dicts, load_fsdp_optimizer_state:
# FSDP.state_dict_type and optim_state_dict); under the others it would save rank 0's unwrapped model and its
# optimizer.state_dict() as if nothing were sharded.
SHARDING_REFUSED = {
    "FSDP2": "accelerate's FSDP2 (--fsdp_version=2) is not supported: lerobot-train gathers and reshards FSDP1's "
    "state only (FSDP.state_dict_type, FSDP.optim_state_dict); launch with --fsdp_version=1",
    "FSDP_FLAT_PARAMS": "FSDP without use_orig_params is not supported: the optimizer, made before `prepare` as "
    "lerobot-train makes it, would hold the parameters FSDP replaces by its flat ones, and nothing would train; "
    "launch with --fsdp_use_orig_params=true (accelerate launch's default; FSDP_USE_ORIG_PARAMS=true)",
    "DEEPSPEED": "accelerate's DeepSpeed (--use_deepspeed) is not supported: lerobot-train has no DeepSpeed "
    "path (ZeRO partitions the optimizer state, and at stage 3 the weights, which lerobot's checkpoint saves "
    "from rank 0 as if whole); shard with FSDP (--use_fsdp --fsdp_version=1)",
    "MEGATRON_LM": "accelerate's Megatron-LM (--use_megatron_lm) is not supported: it trains Megatron's own "
    "model classes with their own train step, not lerobot's policies; shard with FSDP (--use_fsdp "
    "--fsdp_version=1)",
}


def refuse_sharded(accelerator: Any) -> None:
    """FSDP1 with the original parameters kept (use_orig_params) is lerobot-train's sharded path and this
    command's; the other sharded modes are refused, naming the launch flag and why (SHARDING_REFUSED)."""
    mode = accelerator.distributed_type.name
    if mode == "FSDP" and accelerator.is_fsdp2:
        mode = "FSDP2"
    elif mode == "FSDP" and not accelerator.state.fsdp_plugin.use_orig_params:
        mode = "FSDP_FLAT_PARAMS"
    if mode in SHARDING_REFUSED:
        raise ValueError(f"robostream's training command: {SHARDING_REFUSED[mode]}")


def warn_unsharded(accelerator: Any) -> None:
    """accelerate shards only on accelerators (state.py: FSDP and DeepSpeed are chosen for multi-GPU-like
    processes, never with cpu=True, which `--policy.device=cpu` sets): asked for on CPU, it trains unsharded
    DDP without a word."""
    from accelerate.utils import parse_flag_from_env

    for flag, mode in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")):
        if parse_flag_from_env(flag) and accelerator.distributed_type.name != mode:
            logging.warning(
                f"{flag} is set but accelerate chose {accelerator.distributed_type.name} on "
                f"{accelerator.device.type}: the model is not sharded (accelerate shards on GPUs only)"
            )


def is_peft_model(policy: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # without peft no policy is a PeftModel
        return False
    return isinstance(policy, PeftModel)


def resume_map_style(
    cfg: RobostreamTrainConfig, data: TrainingData, *, step: int, num_processes: int
) -> dict[str, int]:
    """lerobot-train's map-style resume: the sampler positioned by the processes and batch size that wrote the
    checkpoint (recorded there), a warning when the run goes on with others (the order resumes at the right
    epoch and offset, but which rank gets which sample changes)."""
    saved_processes = load_training_num_processes(cfg.checkpoint_path) or num_processes
    saved_batch = load_training_batch_size(cfg.checkpoint_path) or cfg.batch_size
    if (saved_processes, saved_batch) != (num_processes, cfg.batch_size):
        logging.warning(
            f"map-style resume: the checkpoint was written by {saved_processes} processes x batch "
            f"{saved_batch}, this run has {num_processes} x {cfg.batch_size}: the data order goes on "
            "from the right sample, not with the same batches (streaming resumes exactly)"
        )
    return resume_sampler(data, step=step, batch_size=saved_batch, num_processes=saved_processes)


def make_processors(cfg: RobostreamTrainConfig, policy: Any, stats: dict, device: torch.device) -> tuple[Any, Any]:
    """lerobot-train's processors: normalised with the dataset's stats on a fresh run; a pretrained policy's or a
    checkpoint's own processors otherwise (their saved stats win on resume)."""
    kwargs: dict[str, Any] = {}
    pretrained = cfg.policy.pretrained_path
    if not pretrained or not cfg.resume:
        kwargs["dataset_stats"] = stats
    if pretrained is not None:
        features = {**policy.config.input_features, **policy.config.output_features}
        pre = {
            "device_processor": {"device": device.type},
            "normalizer_processor": {"features": features, "norm_map": policy.config.normalization_mapping},
            "rename_observations_processor": {"rename_map": cfg.rename_map},
        }
        post = {
            "unnormalizer_processor": {
                "features": policy.config.output_features,
                "norm_map": policy.config.normalization_mapping,
            }
        }
        if not cfg.resume:
            pre["normalizer_processor"]["stats"] = stats
            post["unnormalizer_processor"]["stats"] = stats
        if getattr(cfg.policy, "use_relative_actions", False):
            pre["relative_actions_processor"] = {
                "enabled": True,
                "exclude_joints": getattr(cfg.policy, "relative_exclude_joints", []),
                "action_names": getattr(cfg.policy, "action_feature_names", None),
            }
            post["absolute_actions_processor"] = {"enabled": True}
        kwargs.update(preprocessor_overrides=pre, postprocessor_overrides=post)
    return make_pre_post_processors(
        policy_cfg=cfg.policy,
        pretrained_path=pretrained,
        pretrained_revision=getattr(cfg.policy, "pretrained_revision", None),
        **kwargs,
    )


def batches(data: TrainingData, position: Position, *, resumed: bool) -> Iterator[dict[str, Any]]:
    """Batches from the current position on, epoch after epoch; `position.epoch` follows them. A streaming loader
    keeps a loaded state for its epoch only (the first pass continues mid-epoch, later ones start fresh);
    lerobot's sampler advances its own epoch at every pass.

    An epoch that yields no batch is an error: every later one would be as empty, and the loop would spin through
    them forever. Only the first pass of a resumed run may be empty (a checkpoint saved after its epoch's last
    batch).
    """
    may_be_empty = resumed
    while True:
        if isinstance(data.dataset, StreamingLeRobotDataset):
            data.dataset.set_epoch(position.epoch)
        delivered = 0
        for batch in data.loader:
            delivered += 1
            yield batch
        if not delivered and not may_be_empty:
            raise ValueError(empty_epoch(data, position.epoch))
        may_be_empty = False
        position.epoch += 1


def empty_epoch(data: TrainingData, epoch: int) -> str:
    """Why an epoch gave this process no batch, and what to change."""
    if data.sampler is not None:  # map-style
        why = (
            f"lerobot's sampler leaves {len(data.sampler)} of them after dropping each episode's last "
            "drop_n_last_frames"
        )
    else:
        why = (
            "--robostream.uneven=drop gives every process as many samples as the one with the fewest: none "
            "when processes and workers outnumber the epoch's samples"
        )
    return (
        f"epoch {epoch} gave no batch to train on ({data.num_frames} samples in {data.num_episodes} episodes; "
        f"{why}): select more episodes or sources, or train on fewer processes or workers"
    )


def to_device(
    batch: dict[str, Any],
    camera_keys: list[str],
    device: torch.device,
    augment: "BatchImageTransforms | None",
    epoch: int,
) -> dict[str, Any]:
    """uint8 cameras to float in [0, 1] on the device (lerobot-train's conversion, after the transfer: 4x fewer
    bytes cross), augmented there when `--robostream.augment_on=device`."""
    for key in camera_keys:
        if key in batch and batch[key].dtype == torch.uint8:
            batch[key] = batch[key].to(device, non_blocking=True).to(torch.float32).div_(255)
    return augment(batch, epoch=epoch) if augment is not None else batch


def eval_batches(evaluation: Evaluation, cfg: RobostreamTrainConfig, num_processes: int) -> Iterable[dict[str, Any]]:
    """One eval pass's batches on this process. Map-style: lerobot's (its loader holds `--max_eval_samples`'s
    subset). Streaming: `--max_eval_samples` (0: all) as the first batches of the held-out stream that hold at
    least that many samples over all processes (epoch 0's order every pass: the same samples each time, drawn
    from every task and source at random rather than lerobot's first frames of each task)."""
    if not isinstance(evaluation.loader, StreamingDataLoader) or cfg.max_eval_samples <= 0:
        return evaluation.loader
    return itertools.islice(evaluation.loader, math.ceil(cfg.max_eval_samples / (cfg.batch_size * num_processes)))


def eval_loss(
    policy: Any,
    batches: Iterable[dict[str, Any]],
    preprocessor: Any,
    camera_keys: list[str],
    accelerator: Any,
) -> float:
    """lerobot-train's eval loss: the policy in eval mode, no gradients, under accelerate's autocast; the mean of
    the batches' losses on each process, averaged over the processes (a collective: every rank calls it)."""
    policy.eval()
    total, count = 0.0, 0
    with torch.no_grad(), accelerator.autocast():
        for batch in batches:
            loss, _ = policy.forward(preprocessor(to_device(batch, camera_keys, accelerator.device, None, 0)))
            total += loss.item()
            count += 1
    policy.train()
    mean = torch.tensor(total / max(count, 1), device=accelerator.device)
    return float(accelerator.reduce(mean, reduction="mean").item())


def write_record(record: Any, accelerator: Any, position: Position, loss: float, picked: dict[str, Any]) -> None:
    """One JSON line per step: the losses of every rank and the samples of the global batch (rank by rank)."""
    losses = accelerator.gather(torch.tensor([loss], dtype=torch.float64)).tolist()
    gathered = {k: accelerator.gather(v.to(accelerator.device)).tolist() for k, v in picked.items()}
    if record is not None:
        record.write(json.dumps({"step": position.step, "epoch": position.epoch, "loss": losses, **gathered}) + "\n")


@parser.wrap()  # parses the annotation of `cfg`: a class, not a string (no `from __future__ import annotations`)
def train(cfg: RobostreamTrainConfig) -> None:
    """Train cfg.policy on robostream's data (see the module docstring)."""
    cfg.validate()
    refuse_unsupported(cfg)
    accelerator = make_accelerator(cfg)
    refuse_sharded(accelerator)
    init_logging(accelerator=accelerator)
    warn_unsharded(accelerator)
    sharded = accelerator.distributed_type.name == "FSDP"
    if sharded and cfg.is_reward_model_training:
        raise ValueError(f"robostream's training command: {SHARDED_REFUSED}")
    main = accelerator.is_main_process
    if main:
        logging.info(pformat(cfg.to_dict()))
    env_evaluation = make_env_evaluation(cfg, main=main, sharded=sharded)  # the main process alone evaluates
    wandb = WandBLogger(cfg) if cfg.wandb.enable and cfg.wandb.project and main else None
    if cfg.seed is not None:
        set_seed(cfg.seed, accelerator=accelerator)
    device = accelerator.device
    torch.backends.cudnn.deterministic = cfg.cudnn_deterministic
    torch.backends.cudnn.benchmark = not cfg.cudnn_deterministic
    torch.backends.cuda.matmul.allow_tf32 = True
    # A damaged or foreign data position is refused before minutes of building the data, policy and optimizer.
    resumed_data = (
        checkpoint.read_data_document(cfg.checkpoint_path, streaming=cfg.dataset.streaming) if cfg.resume else None
    )

    trainable = cfg.trainable_config  # the policy, or the reward model (--reward_model.*)
    data = make_training_data(cfg, device=device, policy_config=trainable)
    if resumed_data is not None:
        check_recorded(
            recorded=resumed_data["held_out"],
            computed=data.held_out,
            checkpoint=cfg.checkpoint_path,
            eval_split=cfg.dataset.eval_split,
        )
    if cfg.reward_model is not None:
        policy = make_reward_model(config=cfg.reward_model, meta=data.meta)
    else:
        policy = make_policy(cfg=cfg.policy, ds_meta=data.meta, rename_map=cfg.rename_map)
        if cfg.peft is not None and not is_peft_model(policy):  # a resumed PEFT run's policy comes back wrapped
            policy = policy.wrap_with_peft(peft_cli_overrides=dataclasses.asdict(cfg.peft))
    check_stats(trainable, data.meta.stats, cfg.rename_map)
    accelerator.wait_for_everyone()
    preprocessor, postprocessor = (
        make_reward_processors(config=cfg.reward_model, meta=data.meta)
        if cfg.reward_model is not None
        else make_processors(cfg, policy, data.meta.stats, device)
    )
    optimizer, scheduler = make_optimizer_and_scheduler(cfg, policy)
    weighter = make_weighter(
        config=cfg.sample_weighting, data=data, policy=policy, device=device, read_options=cfg.read_options()
    )
    if weighter is not None and main:
        logging.info(f"sample weighting: {weighter.get_stats()}")

    position = Position()
    if resumed_data is not None:
        position, data_state = checkpoint.load(
            cfg.checkpoint_path, resumed_data, optimizer=optimizer, scheduler=scheduler, sharded=sharded
        )
        if isinstance(data.loader, StreamingDataLoader):
            assert data_state is not None  # read_data_document refused a map-style checkpoint to a streaming run
            data.loader.load_state_dict(data_state)
        else:
            position.epoch = resume_map_style(cfg, data, step=position.step, num_processes=accelerator.num_processes)[
                "epoch"
            ]
        if main:
            logging.info(f"resumed from {cfg.checkpoint_path} at step {position.step} epoch {position.epoch}")

    parameters = sum(p.numel() for p in policy.parameters())  # before FSDP leaves each rank its shard
    if data.streaming:  # rank-aware by itself: accelerate must not shard it again
        policy, optimizer, scheduler = accelerator.prepare(policy, optimizer, scheduler)
    else:
        policy, optimizer, prepared, scheduler = accelerator.prepare(policy, optimizer, data.loader, scheduler)
        # accelerate's loader sets its own pass count (0 here) as the sampler's epoch at every iter()
        prepared.set_epoch(position.epoch)
        data.loader = prepared
        if data.evaluation is not None:  # lerobot-train's: the held-out frames shared out over the processes
            data.evaluation.loader = accelerator.prepare(data.evaluation.loader)
    if sharded and resumed_data is not None:  # collective: the saved full state resharded over these processes
        load_fsdp_optimizer_state(policy, optimizer, cfg.checkpoint_path)
    policy.train()

    meters = {
        "loss": AverageMeter("loss", ":.3f", reduction="mean"),
        "grad_norm": AverageMeter("grdn", ":.3f"),
        "lr": AverageMeter("lr", ":0.1e"),
        "update_s": AverageMeter("updt_s", ":.3f", reduction="max"),
        "dataloading_s": AverageMeter("data_s", ":.3f", reduction="max"),
    }
    tracker = MetricsTracker(
        cfg.batch_size, data.num_frames, data.num_episodes, meters, initial_step=position.step, accelerator=accelerator
    )
    if main:
        logging.info(
            f"{trainable.type}: {parameters:,} parameters, "
            f"{data.num_frames} frames in {data.num_episodes} episodes, windows {data.delta_timestamps}, "
            f"batch {cfg.batch_size} x {accelerator.num_processes} ({accelerator.distributed_type.name}), "
            f"from step {position.step}, "
            f"{'streaming' if data.streaming else 'map-style'}"
        )
    record = open(cfg.robostream.record, "a", buffering=1) if cfg.robostream.record and main else None
    stream = batches(data, position, resumed=cfg.resume)
    started, waited, first = time.perf_counter(), 0.0, position.step
    while position.step < cfg.steps:  # checked first: never fetches a batch it will not train on
        fetch = time.perf_counter()
        batch = next(stream)
        picked: dict[str, Any] | None = (
            {k: batch[k] for k in ("index", "dataset_index") if k in batch} if cfg.robostream.record else None
        )
        weights = batch_weights(weighter, batch)
        batch = preprocessor(to_device(batch, data.meta.camera_keys, device, data.device_augment, position.epoch))
        wait = time.perf_counter() - fetch
        tracker.dataloading_s = wait
        waited += wait
        tracker, _ = update_policy(
            tracker,
            policy,
            batch,
            optimizer,
            cfg.optimizer.grad_clip_norm,
            accelerator=accelerator,
            lr_scheduler=scheduler,
            sample_weighter=weights,
        )
        position.step += 1
        tracker.step()
        if picked is not None:  # collective: every rank takes part, the main process writes
            write_record(record, accelerator, position, tracker.loss.val, picked)
        if cfg.log_freq > 0 and position.step % cfg.log_freq == 0:
            tracker.reduce_across_ranks()
            if main:
                logging.info(tracker)
                if wandb:
                    logged = tracker.to_dict()
                    if weighter is not None:  # lerobot-train's: the weighter's global stats at every log step
                        logged.update({f"sample_weighting/{k}": v for k, v in weighter.get_stats().items()})
                    wandb.log_dict(logged, position.step)
            tracker.reset_averages()
        if cfg.eval_steps > 0 and data.evaluation is not None and position.step % cfg.eval_steps == 0:
            loss = eval_loss(
                policy,
                eval_batches(data.evaluation, cfg, accelerator.num_processes),
                preprocessor,
                data.meta.camera_keys,
                accelerator,
            )
            if main:
                logging.info(f"step {position.step}: eval_loss={loss:.4f}")
                if wandb:
                    wandb.log_dict({"eval_loss": loss}, step=position.step, mode="eval")
        if cfg.save_checkpoint and should_save_checkpoint(position.step, cfg.save_freq, cfg.steps):
            # every rank's loader is at the same step; rank 0's state describes the whole job
            data_state = data.loader.state_dict() if isinstance(data.loader, StreamingDataLoader) else None
            # FSDP: a collective; rank 0 gets the full weights and optimizer state (lerobot-train's), others {}
            model_state, optimizer_state = gather_fsdp_state_dicts(policy, optimizer) if sharded else (None, None)
            if main:
                saved = checkpoint.save(
                    cfg=cfg,
                    position=position,
                    data_state=data_state,
                    held_out=data.held_out,
                    num_processes=accelerator.num_processes,
                    policy=accelerator.unwrap_model(policy),
                    optimizer=optimizer,
                    scheduler=scheduler,
                    preprocessor=preprocessor,
                    postprocessor=postprocessor,
                    model_state_dict=model_state,
                    optim_state_dict=optimizer_state,
                )
                logging.info(f"checkpoint {saved}")
                if wandb:
                    wandb.log_policy(saved)
            accelerator.wait_for_everyone()
        if is_env_eval_step(cfg, position.step):  # after the checkpoint, as lerobot-train: the others wait
            if env_evaluation is not None:
                evaluate_in_env(
                    cfg=cfg,
                    evaluation=env_evaluation,
                    step=position.step,
                    policy=accelerator.unwrap_model(policy),
                    preprocessor=preprocessor,
                    postprocessor=postprocessor,
                    accelerator=accelerator,
                    num_frames=data.num_frames,
                    num_episodes=data.num_episodes,
                    wandb=wandb,
                )
            accelerator.wait_for_everyone()
    if record:
        record.close()
    seconds, steps = time.perf_counter() - started, position.step - first
    push = getattr(trainable, "push_to_hub", False)
    # FSDP: a collective gathering the full weights to push (lerobot-train's accelerator.get_state_dict)
    full_weights = accelerator.get_state_dict(policy) if push and sharded else None
    if main:
        logging.info(
            f"done: {steps} steps in {seconds:.1f} s ({steps / max(seconds, 1e-9):.2f} steps/s), data wait "
            f"{1000 * waited / max(steps, 1):.1f} ms per step"
        )
        if push:
            unwrapped = accelerator.unwrap_model(policy)
            if cfg.reward_model is not None:  # PreTrainedRewardModel's takes the config alone (never sharded)
                unwrapped.push_model_to_hub(cfg)
            elif cfg.policy.use_peft:
                unwrapped.push_model_to_hub(cfg, peft_model=unwrapped)
            else:
                unwrapped.push_model_to_hub(cfg, state_dict=full_weights)
            preprocessor.push_to_hub(trainable.repo_id)
            postprocessor.push_to_hub(trainable.repo_id)
    accelerator.wait_for_everyone()
    accelerator.end_training()


def main() -> None:
    register_third_party_plugins()
    train()


if __name__ == "__main__":
    main()
