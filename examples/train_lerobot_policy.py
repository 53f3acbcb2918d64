"""Train one of lerobot's own policies (ACT) on batches streamed by robostream, with exact resume.

Everything model-side is lerobot 0.6's, built the way `lerobot-train` builds it: the policy config class, the
policy factory (`make_policy`), the normalising pre-processor made from the dataset's stats
(`make_pre_post_processors`), the window each key needs (`resolve_delta_timestamps` over the config's delta
indices), the optimizer preset and lerobot's checkpoint layout (`pretrained_model/` + `training_state/`). Only the
data side changes: `StreamingLeRobotDataset` + `StreamingDataLoader` replace `LeRobotDataset` + `DataLoader`, and the
checkpoint also holds `loader.state_dict()`, so `--resume` continues mid-epoch with exactly the batches an
uninterrupted run would have seen.

    # needs lerobot (Python 3.12); robostream from a checkout works through PYTHONPATH
    PYTHONPATH=. python examples/train_lerobot_policy.py --root out/sample --output_dir runs/act --steps 200
    PYTHONPATH=. python examples/train_lerobot_policy.py --root out/sample --output_dir runs/act --steps 400 --resume

The default config is ACT shrunk to run on a laptop CPU in seconds (and with no pretrained ResNet weights, so it
needs no network); `--policy_overrides '{"dim_model": 512, "chunk_size": 100, "n_action_steps": 100}'` moves
any field back towards lerobot's defaults. One process: for several GPUs see examples/train_streaming.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from lerobot.common.train_utils import load_training_state, save_training_state
from lerobot.configs import PreTrainedConfig
from lerobot.datasets.factory import resolve_delta_timestamps
from lerobot.policies import PreTrainedPolicy, make_policy, make_pre_post_processors
from lerobot.policies.factory import make_policy_config
from lerobot.utils.random_utils import set_seed
from safetensors.torch import load_model

from robostream import StreamingDataLoader, StreamingLeRobotDataset
from robostream.format.metadata import DatasetMetadata, load_metadata

MODEL_DIR = "pretrained_model"  # lerobot's names: a checkpoint's policy + processors, and its training state
DATA_STATE = "data_state.json"  # written last into a checkpoint; the rename that follows commits it
CHECKPOINT = re.compile(r"checkpoint-(\d+)")

# ACT at CPU size: a few transformer layers of width 64 instead of 512, chunks of 10 actions instead of 100, and a
# ResNet-18 from random init (lerobot's default downloads ImageNet weights from torchvision).
CPU_PRESETS: dict[str, dict[str, Any]] = {
    "act": dict(chunk_size=10, n_action_steps=10, dim_model=64, n_heads=2, dim_feedforward=128,
                n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1, latent_dim=8,
                pretrained_backbone_weights=None, optimizer_lr=1e-4, optimizer_lr_backbone=1e-4),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="dataset folder or fsspec URL (hf://, s3://, https://)")
    p.add_argument("--output_dir", type=Path, default=Path("outputs/train_lerobot_policy"),
                   help="checkpoints go to <dir>/checkpoint-<step>")
    p.add_argument("--policy", choices=sorted(CPU_PRESETS), default="act", help="lerobot policy type")
    p.add_argument("--policy_overrides", type=json.loads, default={},
                   help='JSON fields of the policy config over the CPU preset, e.g. \'{"dim_model": 128}\'')
    p.add_argument("--steps", type=int, default=100, help="total optimisation steps (counting resumed ones)")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--num_workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--save_every", type=int, default=50, help="checkpoint every N steps (and at the last step)")
    p.add_argument("--seed", type=int, default=0, help="model init, dropout/VAE noise and the dataset's shuffle")
    p.add_argument("--device", default="cpu")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest complete checkpoint in output_dir (from step 0 if there is none)")
    p.add_argument("--record_samples", type=Path, default=None,
                   help="append every step's loss, batch `index` values and padded counts as JSON lines to this file (the "
                        "tests compare an interrupted+resumed run with an uninterrupted one through it)")
    args = p.parse_args(argv)
    if min(args.batch_size, args.steps, args.save_every) < 1 or args.num_workers < 0:
        p.error("--batch_size, --steps and --save_every must be >= 1, --num_workers >= 0")
    return args


# -- lerobot's side: config, policy, processors, optimizer -------------------------------------------------------
def build_config(args: argparse.Namespace) -> PreTrainedConfig:
    fields = {**CPU_PRESETS[args.policy], **args.policy_overrides}
    return make_policy_config(args.policy, device=args.device, push_to_hub=False, **fields)


def check_stats(cfg: PreTrainedConfig, meta: DatasetMetadata) -> None:
    """lerobot's normaliser passes a key through unchanged when the stats lack it; fail instead."""
    missing = [k for k in {**cfg.input_features, **cfg.output_features} if k not in meta.stats]
    if missing:
        raise SystemExit(f"meta/stats.json of the dataset has no statistics for {missing}, which the policy "
                         "normalises")


# -- checkpoints: lerobot's layout + the data stream's position ---------------------------------------------------
@dataclass
class Progress:
    step: int = 0  # optimisation steps done
    epoch: int = 0  # the epoch the data position belongs to


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint: `checkpoint-<step>` folders exist only once the rename committed them."""
    found = [(int(m.group(1)), p) for p in output_dir.glob("checkpoint-*")
             if (m := CHECKPOINT.fullmatch(p.name)) and (p / DATA_STATE).is_file()]
    return max(found)[1] if found else None


def save_checkpoint(output_dir: Path, progress: Progress, policy: PreTrainedPolicy, preprocessor: Any,
                    postprocessor: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                    loader: StreamingDataLoader) -> Path:
    """Write into a temporary folder, then rename it: a crash mid-save leaves the previous checkpoint intact.

    `pretrained_model/` is a complete lerobot policy (config, weights, processors with their stats: what
    `lerobot-eval --policy.path=...` loads); `training_state/` is lerobot's (optimizer, RNG, step).
    """
    final, tmp = output_dir / f"checkpoint-{progress.step}", output_dir / f".tmp-checkpoint-{progress.step}"
    if tmp.exists():
        shutil.rmtree(tmp)  # left by an interrupted save of the same step
    policy.save_pretrained(tmp / MODEL_DIR)
    preprocessor.save_pretrained(tmp / MODEL_DIR)
    postprocessor.save_pretrained(tmp / MODEL_DIR)
    # The RNG state saved here is the one the next step starts from (dropout, the VAE's noise), so a resumed
    # run's steps are the same computation, not just the same data.
    save_training_state(tmp, progress.step, optimizer, scheduler)
    state = {"step": progress.step, "epoch": progress.epoch, "data": loader.state_dict()}
    (tmp / DATA_STATE).write_text(json.dumps(state))
    if final.exists():  # a resumed run may save a step it had already reached
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def load_checkpoint(path: Path, policy: PreTrainedPolicy, optimizer: torch.optim.Optimizer, scheduler: Any,
                    loader: StreamingDataLoader) -> Progress:
    """Restore weights (strictly: every tensor must match), optimizer, RNG and the data position."""
    load_model(policy, str(path / MODEL_DIR / "model.safetensors"), device=str(policy.config.device))
    step, _, _ = load_training_state(path, optimizer, scheduler)
    state = json.loads((path / DATA_STATE).read_text())
    if state["step"] != step:
        raise RuntimeError(f"{path}: {DATA_STATE} is at step {state['step']} but training_state at step {step}")
    loader.load_state_dict(state["data"])
    return Progress(state["step"], state["epoch"])


# -- the loop -----------------------------------------------------------------------------------------------------
def batches(loader: StreamingDataLoader, dataset: StreamingLeRobotDataset, progress: Progress
            ) -> Iterator[dict[str, Any]]:
    """Batches from the current position on, epoch after epoch. A loaded data state belongs to `progress.epoch`
    and set_epoch keeps it only for that epoch: the first pass continues mid-epoch, later ones start fresh."""
    while True:
        dataset.set_epoch(progress.epoch)
        yield from loader
        progress.epoch += 1


def open_record(path: Path | None) -> TextIO | None:
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", buffering=1)  # appended: a resumed run continues the same file; a line per step


def main(args: argparse.Namespace) -> None:
    # robostream's metadata serves as lerobot's ds_meta (features, fps, stats); windows depend on the config and fps
    meta = load_metadata(args.root)
    cfg = build_config(args)
    set_seed(args.seed)  # before make_policy: the initial weights are a function of the seed
    policy = make_policy(cfg, ds_meta=meta)  # fills cfg.input_features / output_features from the dataset
    check_stats(cfg, meta)
    resume_from = latest_checkpoint(args.output_dir) if args.resume else None
    # Like lerobot-train: a fresh run normalises with the dataset's stats, a resumed one with the checkpoint's.
    preprocessor, postprocessor = make_pre_post_processors(
        cfg, pretrained_path=str(resume_from / MODEL_DIR) if resume_from else None, dataset_stats=meta.stats)
    optimizer_cfg, scheduler_cfg = cfg.get_optimizer_preset(), cfg.get_scheduler_preset()
    optimizer = optimizer_cfg.build(policy.get_optim_params())
    scheduler = scheduler_cfg.build(optimizer, args.steps) if scheduler_cfg is not None else None

    # The one change from lerobot-train's data side. Same sample keys, dtypes, shapes and `<key>_is_pad` masks as
    # LeRobotDataset; cameras stay uint8 through the workers' shared memory (4x less) and become float below,
    # exactly where lerobot-train converts uint8 cameras.
    delta_timestamps = resolve_delta_timestamps(cfg, meta)  # ACT: {"action": [0, 1/fps, ... (chunk_size-1)/fps]}
    dataset = StreamingLeRobotDataset(root=args.root, delta_timestamps=delta_timestamps, seed=args.seed,
                                      return_uint8=True)
    # The loader's own generator: torch's DataLoader draws a seed from this generator at every iter(), which would
    # otherwise advance the global RNG that dropout and the VAE use, and a resumed run would diverge from there.
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers,
                                 pin_memory=torch.device(args.device).type == "cuda",
                                 generator=torch.Generator().manual_seed(args.seed))

    progress = Progress()
    if resume_from is not None:
        progress = load_checkpoint(resume_from, policy, optimizer, scheduler, loader)
        print(f"resumed from {resume_from} at step {progress.step} epoch {progress.epoch}")
    elif args.resume:
        print(f"resume: no complete checkpoint in {args.output_dir}, starting from step 0")
    policy.train()
    print(f"{args.policy}: {sum(p.numel() for p in policy.parameters()):,} parameters on {args.device}, "
          f"delta_timestamps {delta_timestamps}, batch {args.batch_size}, from step {progress.step}")

    record = open_record(args.record_samples)
    start, samples = time.perf_counter(), 0
    stream = batches(loader, dataset, progress)
    while progress.step < args.steps:  # checked first: never fetches (and decodes) a batch it will not train on
        batch = next(stream)
        indices = batch["index"].tolist()
        padded = {k: int(v.sum()) for k, v in batch.items() if k.endswith("_is_pad")}  # steps past an episode end
        for key in meta.camera_keys:
            batch[key] = batch[key].float().div_(255)  # what lerobot-train does with uint8 cameras
        batch = preprocessor(batch)  # normalise with the stats, move to the device
        loss, parts = policy.forward(batch)
        if not torch.isfinite(loss):  # before the update: a non-finite loss must not reach the weights
            raise FloatingPointError(f"step {progress.step + 1}: loss is {loss.item()} ({parts})")
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), optimizer_cfg.grad_clip_norm)
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
        progress.step += 1
        samples += len(indices)
        print(f"step {progress.step} epoch {progress.epoch} loss {loss.item():.4f} grad_norm {grad_norm.item():.3f}",
              flush=True)
        if record:
            record.write(json.dumps({"step": progress.step, "epoch": progress.epoch, "loss": loss.item(),
                                     "index": indices, "padded": padded}) + "\n")
        if progress.step % args.save_every == 0 or progress.step == args.steps:
            saved = save_checkpoint(args.output_dir, progress, policy, preprocessor, postprocessor, optimizer,
                                    scheduler, loader)
            print(f"saved {saved}")
    if record:
        record.close()
    seconds = time.perf_counter() - start
    print(f"done: {samples} samples in {seconds:.1f} s ({samples / max(seconds, 1e-9):.1f} samples/s)")


if __name__ == "__main__":
    main(parse_args())
