"""Evaluation in a simulation env during training (`--env.type=...`, `--env_eval_freq`, `--eval.n_episodes`,
`--eval.batch_size`, `--eval.use_async_envs`): lerobot-train's, with lerobot's own pieces.

lerobot's env processors (`make_env_pre_post_processors`, made once on the main process), its vectorised envs
(`make_env` with `--eval.batch_size` envs, closed after each evaluation) and its rollouts (`eval_policy_all`: the
unwrapped policy in eval mode with the training run's pre/post processors, episodes seeded from `--seed`, up to 4
of them rendered to `<output_dir>/eval/videos_step_<step>/`), under `no_grad` and accelerate's autocast, on the
main process alone; its log lines (`Eval policy at step N`, `Suite <name> aggregated: {...}` for per_task,
per_group and overall) and its wandb metrics (`eval/avg_sum_reward`, `eval/pc_success`, `eval/eval_s`, the rest of
eval_policy_all's result and the first video).

Beyond lerobot-train: the random state (python, numpy, torch) the rollouts draw from is put back afterwards, so
training goes on with the numbers it would have drawn without the evaluation (a diffusion policy's sampling noise
and the envs' resets would otherwise move them) and a run resumed from a checkpoint written at an evaluation step
trains exactly as the run that evaluated there. The data's position is not touched: the loaders and samplers are
never read here.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lerobot.common.train_utils import get_step_identifier
from lerobot.envs import close_envs, make_env, make_env_pre_post_processors
from lerobot.envs.configs import EnvConfig, HubEnvConfig
from lerobot.scripts.lerobot_eval import eval_policy_all
from lerobot.utils.logging_utils import AverageMeter, MetricsTracker
from lerobot.utils.random_utils import get_rng_state, set_rng_state

from robostream.lerobot.config import RobostreamTrainConfig

# lerobot-train's: how many of an evaluation's episodes are rendered to mp4
MAX_EPISODES_RENDERED = 4


@dataclass
class EnvEvaluation:
    """What evaluating in the env takes besides the policy: lerobot's env processors (observations from the env's
    format to the policy's, actions back), made once for the run.

    Args:
        preprocessor: the env's observation pipeline (`make_env_pre_post_processors`).
        postprocessor: the env's action pipeline.
    """

    preprocessor: Any
    postprocessor: Any


# lerobot-train evaluates on the main process alone, with the unwrapped policy: under FSDP that module holds this
# rank's shards only (use_orig_params), and its forward would need every rank's.
SHARDED_REFUSED = (
    "--env.* with FSDP is not supported: the main process alone evaluates in the env (lerobot-train's), and a "
    "sharded policy holds only its shard there; evaluate the checkpoints with lerobot-eval "
    "--policy.path=.../pretrained_model, or train unsharded"
)

# lerobot 0.6.1 makes these envs (pusht, aloha: EnvConfig.create_envs) by gym id in each async worker, forked from
# a forkserver that has not imported the id's package (huggingface/lerobot#448); and a rollout asks every env for
# `task_description`, which an async worker that lacks it answers by shutting down. Refused before training rather
# than failing at the first evaluation.
ASYNC_BY_GYM_ID_REFUSED = (
    "--env.type={env} with --eval.use_async_envs=true (lerobot's default) and --eval.batch_size > 1 fails in "
    "lerobot 0.6.1's evaluation: its async workers make the env by gym id in a forkserver that has not imported "
    "the env's package (NamespaceNotFound), and one asked for `task_description` shuts down; add "
    "--eval.use_async_envs=false (the envs step in the training process)"
)


def make_env_evaluation(cfg: RobostreamTrainConfig, *, main: bool, sharded: bool) -> EnvEvaluation | None:
    """The env processors of `--env.*`, made on the main process as lerobot-train makes them (None without an env,
    and on the other processes). Refused on every process, before training: an env with a sharded policy
    (SHARDED_REFUSED), async envs made by gym id (ASYNC_BY_GYM_ID_REFUSED).

    Args:
        cfg: the run's config (`env`, `policy`).
        main: whether this is the main process.
        sharded: whether the policy is sharded (FSDP).
    """
    if cfg.env is None:
        return None
    if sharded:
        raise ValueError(f"robostream's training command: {SHARDED_REFUSED}")
    if cfg.eval.use_async_envs and cfg.eval.batch_size > 1 and made_by_gym_id(cfg.env):
        raise ValueError(f"robostream's training command: {ASYNC_BY_GYM_ID_REFUSED.format(env=cfg.env.type)}")
    if not main:
        return None
    logging.info(f"{cfg.env.task=}")
    preprocessor, postprocessor = make_env_pre_post_processors(env_cfg=cfg.env, policy_cfg=cfg.policy)
    return EnvEvaluation(preprocessor=preprocessor, postprocessor=postprocessor)


def made_by_gym_id(env: EnvConfig) -> bool:
    """Whether lerobot makes this env with `gym.make(<package>/<task>)` (EnvConfig's own create_envs: pusht,
    aloha), not with classes of its own (LIBERO, Meta-World, ...) or a Hub repository's make_env."""
    return not isinstance(env, HubEnvConfig) and type(env).create_envs is EnvConfig.create_envs


def is_env_eval_step(cfg: RobostreamTrainConfig, step: int) -> bool:
    """lerobot-train's test, after the `step`th update: every `--env_eval_freq` steps (0: never), with an env."""
    return cfg.env is not None and cfg.env_eval_freq > 0 and step % cfg.env_eval_freq == 0


def evaluate_in_env(
    *,
    cfg: RobostreamTrainConfig,
    evaluation: EnvEvaluation,
    step: int,
    policy: Any,
    preprocessor: Any,
    postprocessor: Any,
    accelerator: Any,
    num_frames: int,
    num_episodes: int,
    wandb: Any,
) -> dict[str, Any]:
    """One evaluation in the env (main process only), logged as lerobot-train logs it; returns eval_policy_all's
    result.

    Args:
        cfg: the run's config (`env`, `eval`, `seed`, `steps`, `output_dir`, `batch_size`).
        evaluation: the env processors (make_env_evaluation).
        step: the training steps done (names the videos' folder and the logged step).
        policy: the policy being trained, unwrapped (eval_policy_all sets its eval mode and puts its training
            mode back).
        preprocessor: the training run's policy preprocessor (normalisation with its stats).
        postprocessor: the training run's policy postprocessor.
        accelerator: the run's accelerate Accelerator (its autocast).
        num_frames: the training data's frames (lerobot's eval MetricsTracker counts samples with them).
        num_episodes: the training data's episodes.
        wandb: lerobot's WandBLogger, or None.
    """
    assert cfg.env is not None  # is_env_eval_step
    logging.info(f"Eval policy at step {step}")
    rng = get_rng_state()
    envs = make_env(cfg.env, n_envs=cfg.eval.batch_size, use_async_envs=cfg.eval.use_async_envs)
    try:
        with torch.no_grad(), accelerator.autocast():
            info = eval_policy_all(
                envs=envs,
                policy=policy,
                env_preprocessor=evaluation.preprocessor,
                env_postprocessor=evaluation.postprocessor,
                preprocessor=preprocessor,
                postprocessor=postprocessor,
                n_episodes=cfg.eval.n_episodes,
                videos_dir=Path(cfg.output_dir) / "eval" / f"videos_step_{get_step_identifier(step, cfg.steps)}",
                max_episodes_rendered=MAX_EPISODES_RENDERED,
                start_seed=cfg.seed,
                max_parallel_tasks=cfg.env.max_parallel_tasks,
            )
    finally:
        close_envs(envs)
        set_rng_state(rng)
    overall = info["overall"]
    for suite, suite_info in info.items():
        logging.info("Suite %s aggregated: %s", suite, suite_info)
    tracker = MetricsTracker(
        cfg.batch_size,
        num_frames,
        num_episodes,
        {
            "avg_sum_reward": AverageMeter("∑rwrd", ":.3f"),
            "pc_success": AverageMeter("success", ":.1f"),
            "eval_s": AverageMeter("eval_s", ":.3f"),
        },
        initial_step=step,
        accelerator=accelerator,
    )
    # lerobot-train's: the three headline numbers move from `overall` to the tracker's keys
    tracker.eval_s = overall.pop("eval_s")
    tracker.avg_sum_reward = overall.pop("avg_sum_reward")
    tracker.pc_success = overall.pop("pc_success")
    if wandb is not None:
        wandb.log_dict({**tracker.to_dict(), **info}, step, mode="eval")
        wandb.log_video(overall["video_paths"][0], step, mode="eval")
    return info
