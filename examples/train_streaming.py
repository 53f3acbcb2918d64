"""Resumable training on a streamed LeRobot dataset with Hugging Face Accelerate.

A tiny policy (a shared conv encoder over every camera + the state) regresses the action. The example shows the parts
a real training script needs around robostream: one StreamingLeRobotDataset per rank, uint8 frames converted to
float on the device, atomic checkpoints holding the model, the optimizer AND the data stream position, and an exact
mid-epoch resume (the same samples, in the same order, as a run that was never interrupted).

    # GPUs (one process per GPU):
    accelerate launch --num_processes 8 examples/train_streaming.py --root out/sample --output_dir runs/a
    # CPU processes: `accelerate launch --cpu` starts ONE process unless mpirun is set up; use torchrun's launcher:
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 examples/train_streaming.py ...
    # continue from the newest complete checkpoint in --output_dir:
    accelerate launch ... examples/train_streaming.py --root out/sample --output_dir runs/a --resume
    # throughput of the data path alone (no model; plain `python` runs one process):
    python examples/train_streaming.py --root out/sample --dummy --steps 200

SIGUSR1 to any rank asks for a clean stop: every rank finishes its current step, a checkpoint is saved and the run
exits with status 0 (examples/slurm/train.sbatch sends it before a time limit or preemption, then requeues the job).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, set_seed
from torch import nn

from robostream import StreamingDataLoader, StreamingLeRobotDataset, StreamOptions
from robostream.durable import make_scratch, publish, remove_scratch_left
from robostream.plan.state import CHECKSUM, check_checksum, state_checksum

STATE_FILE = "trainer_state.json"  # written last into a checkpoint; the rename that follows commits it
CHECKPOINT = re.compile(r"checkpoint-(\d+)")
SCRATCH_PREFIX = ".tmp-checkpoint-"  # a save's scratch folder: `.tmp-checkpoint-<step>-<random>`, marked as ours
SCRATCH_MADE_BY = "examples/train_streaming.py's checkpoint saves"
STOP_SIGNAL = signal.SIGUSR1  # "checkpoint and exit": SLURM's --signal warning, forwarded by examples/slurm/


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="dataset folder or fsspec URL (hf://, s3://, https://)")
    p.add_argument("--output_dir", default="outputs/train_streaming", help="checkpoints go to <dir>/checkpoint-<step>")
    p.add_argument("--batch_size", type=int, default=32, help="per rank")
    p.add_argument("--num_workers", type=int, default=4, help="DataLoader worker processes per rank")
    p.add_argument("--steps", type=int, default=1000, help="total optimisation steps (counting resumed ones)")
    p.add_argument("--epochs", type=int, default=None, help="stop after this many epochs (default: --steps decides)")
    p.add_argument("--save_every", type=int, default=500, help="checkpoint every N steps (and at the last step)")
    p.add_argument("--seed", type=int, default=0, help="model init and the dataset's shuffle")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--pool_size", type=int, default=8, help="live episode pieces per canonical stream")
    p.add_argument(
        "--delta_timestamps",
        type=json.loads,
        default=None,
        help='JSON, e.g. \'{"observation.images.cam0": [-0.1, 0.0], "action": [0.0, 0.05, 0.1]}\'',
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest complete checkpoint in output_dir (from step 0 if there is none, "
        "so a requeued job can always pass it)",
    )
    p.add_argument(
        "--dummy", action="store_true", help="only load data (no model, no checkpoints): measure samples/s and frames/s"
    )
    p.add_argument("--log_every", type=int, default=10)
    p.add_argument(
        "--record_samples",
        type=Path,
        default=None,
        help="debugging/verification aid: append every step's batch `index` values as JSON lines to "
        "PATH with `.rank<r>` before its suffix (used by the tests to prove an exact resume)",
    )
    p.add_argument(
        "--debug_kill_at_step",
        type=int,
        default=None,
        help="verification aid: SIGKILL every rank while it writes the checkpoint of this step (after "
        "the model and optimizer files, before the commit), like a preemption mid-save",
    )
    args = p.parse_args(argv)
    if min(args.batch_size, args.steps, args.save_every, args.log_every) < 1 or args.num_workers < 0:
        p.error("--batch_size, --steps, --save_every and --log_every must be >= 1, --num_workers >= 0")
    kill = args.debug_kill_at_step
    if kill is not None and kill % args.save_every and kill != args.steps:
        p.error(f"--debug_kill_at_step {kill} is not a checkpoint step (a multiple of --save_every, or --steps)")
    return args


# -- the policy ---------------------------------------------------------------------------------------------------
def window(delta_timestamps: dict[str, list[float]] | None, key: str) -> int:
    """Frames per sample of `key`: the length of its delta_timestamps window, else 1."""
    return len((delta_timestamps or {}).get(key, [0.0]))


class TinyPolicy(nn.Module):
    """Camera frames (any window length) + state (window) -> action (window), flattened.

    One conv encoder is shared by all cameras and frames; deliberately small so the example runs on a laptop CPU.
    """

    def __init__(self, num_frames: int, state_dim: int, action_dim: int, width: int = 128) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2),
            nn.ReLU(),  # video features are RGB
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(num_frames * 32 + state_dim, width), nn.ReLU(), nn.Linear(width, action_dim)
        )

    def forward(self, images: list[torch.Tensor], state: torch.Tensor) -> torch.Tensor:
        # (B, [T,] C, H, W) -> (B*T, C, H, W) -> (B, T*32): frames of a window become features side by side
        features = [self.encoder(x.flatten(0, -4)).view(x.shape[0], -1) for x in images]
        return self.head(torch.cat(features + [state.flatten(1)], dim=1))


def build_policy(dataset: StreamingLeRobotDataset, delta_timestamps: dict[str, list[float]] | None) -> TinyPolicy:
    """Input and output sizes from the dataset's features and the windows asked for."""
    features = dataset.meta.info.features

    def size(key: str) -> int:
        return math.prod(features[key]["shape"]) * window(delta_timestamps, key)

    num_frames = sum(window(delta_timestamps, k) for k in dataset.meta.camera_keys)
    return TinyPolicy(num_frames, size("observation.state"), size("action"))


def to_float_images(batch: dict[str, Any], keys: list[str], device: torch.device) -> list[torch.Tensor]:
    """uint8 frames cross to the device (4x fewer bytes than float32) and become float in [0, 1] there."""
    return [batch[k].to(device, non_blocking=True).float().div_(255) for k in keys]


def action_loss(prediction: torch.Tensor, batch: dict[str, Any], device: torch.device) -> torch.Tensor:
    """MSE on the action window, ignoring padded steps past an episode's end (`action_is_pad`)."""
    target = batch["action"].to(device, non_blocking=True)
    keep = torch.ones_like(target)
    if "action_is_pad" in batch:  # (B, H) -> (B, H, A)
        keep = (~batch["action_is_pad"].to(device)).unsqueeze(-1).expand_as(target).float()
    error = (prediction - target.flatten(1)) ** 2 * keep.flatten(1)
    return error.sum() / keep.sum().clamp(min=1)


# -- checkpoints --------------------------------------------------------------------------------------------------
@dataclass
class Progress:
    step: int = 0  # optimisation steps done
    epoch: int = 0  # the epoch the data position belongs to


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint: `checkpoint-<step>` dirs only exist once committed by the rename."""
    found = [
        (int(m.group(1)), p)
        for p in output_dir.glob("checkpoint-*")
        if (m := CHECKPOINT.fullmatch(p.name)) and (p / STATE_FILE).is_file()
    ]
    return max(found)[1] if found else None


def save_checkpoint(
    accelerator: Accelerator, output_dir: Path, progress: Progress, loader: StreamingDataLoader, kill: bool = False
) -> Path:
    """Write everything into a scratch folder, then rename it: a crash mid-save leaves the previous checkpoint intact.

    Every rank writes its share (accelerate saves each rank's RNG state) into rank 0's scratch folder; rank 0 writes
    the JSON and commits. Only what the example made is deleted (robostream.durable): scratch folders of interrupted
    saves holding its marker, and a step saved before that this one replaces (a link: unlinked, never followed); a
    user's `.tmp-checkpoint-*` is left alone, with a warning.
    `kill` (--debug_kill_at_step) SIGKILLs every rank between the model/optimizer files and the commit.
    """
    final = output_dir / f"checkpoint-{progress.step}"
    scratch: list[str | None] = [None]
    if accelerator.is_main_process:  # the only process that removes or renames anything
        remove_scratch_left(output_dir, SCRATCH_PREFIX, made_by=SCRATCH_MADE_BY)  # interrupted saves'
        scratch = [str(make_scratch(output_dir, f"{SCRATCH_PREFIX}{progress.step}-", made_by=SCRATCH_MADE_BY))]
    broadcast_object_list(scratch)  # its name is random: every rank writes where rank 0 made it
    new = Path(scratch[0]) / "checkpoint"
    accelerator.save_state(str(new))
    accelerator.wait_for_everyone()
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    if accelerator.is_main_process:
        # Ranks consume in lockstep, so rank 0's loader state describes the whole job's data position.
        state = {
            "step": progress.step,
            "epoch": progress.epoch,
            "world_size": accelerator.num_processes,
            "data": loader.state_dict(),
        }
        # One checksum over the whole file: an edited step or epoch, or another step's data, is refused at resume.
        (new / STATE_FILE).write_text(json.dumps({**state, CHECKSUM: state_checksum(state)}))
        publish(new, final, Path(scratch[0]))  # a resumed run may save a step it had already reached: replaced
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Accelerator, output_dir: Path, loader: StreamingDataLoader) -> Progress:
    """Restore model, optimizer, RNG and the data position from the newest complete checkpoint (if any)."""
    chosen = [str(latest_checkpoint(output_dir) or "") if accelerator.is_main_process else None]
    broadcast_object_list(chosen)  # every rank loads rank 0's choice, even if a file system lags
    if not chosen[0]:
        accelerator.print(f"resume: no complete checkpoint in {output_dir}, starting from step 0")
        return Progress()
    path = Path(chosen[0])
    accelerator.load_state(str(path))
    state = json.loads((path / STATE_FILE).read_text())
    check_checksum(state, where=str(path / STATE_FILE))
    if state["epoch"] != state["data"]["epoch"]:  # the epoch training counts must be the one the loader continues
        raise ValueError(
            f"{path / STATE_FILE}: epoch {state['epoch']} but its data state is of epoch "
            f"{state['data']['epoch']}; resume from another checkpoint"
        )
    loader.load_state_dict(state["data"])
    accelerator.print(f"resumed from {path} at step {state['step']} epoch {state['epoch']}")
    return Progress(state["step"], state["epoch"])


# -- stopping on a signal -----------------------------------------------------------------------------------------
class StopRequest:
    """Remembers that STOP_SIGNAL arrived; the loop acts on it between steps (a handler must not touch torch)."""

    def __init__(self) -> None:
        self.received = False
        # Installed before the loader starts workers: forked ones inherit this handler instead of the default
        # action (exit), and SLURM signals every process of a job step, loader workers included.
        signal.signal(STOP_SIGNAL, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.received = True
        # One request is enough. Repeats are common (SLURM signals every process of the step, and the launcher
        # forwards the signal too) and could land during interpreter shutdown, when Python has put back the
        # default action (exit) for handled signals but leaves ignored ones ignored.
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)


def ignore_stop_signal(worker_id: int) -> None:
    """Loader workers ignore STOP_SIGNAL: a spawned or forkserver worker would otherwise die of it."""
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)


def stop_agreed(accelerator: Accelerator, stop: StopRequest) -> bool:
    """True on every rank once any rank got STOP_SIGNAL, so all stop after the same step (one all-reduce of a
    scalar per step): the checkpoint that follows is collective."""
    if stop.received:
        accelerator.set_trigger()
    return accelerator.check_trigger()


# -- the loop -----------------------------------------------------------------------------------------------------
@dataclass
class Meter:
    """Samples and the time spent blocked on the loader, since the start and since the last log line."""

    start: float = field(default_factory=time.perf_counter)
    wait_s: float = 0.0
    samples: int = 0
    last_time: float = field(default_factory=time.perf_counter)
    last_samples: int = 0

    def rate(self) -> float:
        """Samples/s of this rank since the previous call."""
        now = time.perf_counter()
        rate = (self.samples - self.last_samples) / max(now - self.last_time, 1e-9)
        self.last_time, self.last_samples = now, self.samples
        return rate


def batches(
    loader: StreamingDataLoader, dataset: StreamingLeRobotDataset, progress: Progress, epochs: int | None, meter: Meter
) -> Iterator[dict[str, Any]]:
    """Batches from the current position on, epoch after epoch, timing how long the loop waits for each.

    `progress.epoch` is kept current: a loaded data state belongs to it, and set_epoch keeps that state only for
    the same epoch, so the first pass continues mid-epoch and later ones start fresh.
    """
    while epochs is None or progress.epoch < epochs:
        dataset.set_epoch(progress.epoch)
        iterator = iter(loader)
        while True:
            waited = time.perf_counter()
            batch = next(iterator, None)
            meter.wait_s += time.perf_counter() - waited
            if batch is None:
                break
            meter.samples += len(batch["index"])
            yield batch
        progress.epoch += 1


def open_record(path: Path | None, rank: int) -> TextIO | None:
    """This rank's --record_samples file (appended to, so a resumed run continues a killed run's file)."""
    if path is None:
        return None
    path = path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", buffering=1)  # line-buffered: each step reaches the OS before the next


def check_layout(accelerator: Accelerator, dataset: StreamingLeRobotDataset) -> None:
    """The dataset splits data by the rank/world it resolves; they must be the processes Accelerate syncs."""
    consumer = dataset.consumer(num_workers=1, worker=0)
    if (consumer.rank, consumer.world_size) != (accelerator.process_index, accelerator.num_processes):
        raise RuntimeError(
            f"robostream sees rank {consumer.rank} of {consumer.world_size} but Accelerate runs process "
            f"{accelerator.process_index} of {accelerator.num_processes} (on CPU launch with ACCELERATE_USE_CPU=true "
            f"accelerate launch --multi_gpu ...): the data split and the gradient sync would disagree"
        )


def make_data(
    args: argparse.Namespace, accelerator: Accelerator
) -> tuple[StreamingLeRobotDataset, StreamingDataLoader]:
    dataset = StreamingLeRobotDataset(
        root=args.root,
        delta_timestamps=args.delta_timestamps,
        seed=args.seed,
        streams=StreamOptions(pool_size=args.pool_size),
        return_uint8=True,
    )
    check_layout(accelerator, dataset)
    # NOT accelerator.prepare(loader): the dataset already gives each rank its own disjoint share of the epoch
    # (rank/world from torch.distributed), and prepare would shard or wrap it again (dropping or repeating
    # samples) and hide the StreamingDataLoader whose state_dict() the checkpoints need.
    loader = StreamingDataLoader(
        dataset,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        pin_memory=accelerator.device.type == "cuda",
        worker_init_fn=ignore_stop_signal,
    )
    return dataset, loader


def train_step(
    accelerator: Accelerator,
    policy: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Any],
    cameras: list[str],
) -> torch.Tensor:
    device = accelerator.device
    prediction = policy(
        to_float_images(batch, cameras, device), batch["observation.state"].to(device, non_blocking=True)
    )
    loss = action_loss(prediction, batch, device)
    optimizer.zero_grad(set_to_none=True)
    accelerator.backward(loss)
    optimizer.step()
    return loss.detach()


def log_step(
    accelerator: Accelerator, progress: Progress, loss: torch.Tensor | None, meter: Meter, frames_per_sample: int
) -> None:
    rate = meter.rate() * accelerator.num_processes  # ranks run in lockstep
    loss_text = "" if loss is None else f" loss {accelerator.reduce(loss, 'mean').item():.4f}"  # all ranks call
    accelerator.print(
        f"step {progress.step} epoch {progress.epoch}{loss_text} samples/s {rate:.1f} "
        f"frames/s {rate * frames_per_sample:.1f}"
    )


def summarise(accelerator: Accelerator, dataset: StreamingLeRobotDataset, meter: Meter, frames_per_sample: int) -> None:
    """Whole-run throughput and the data-wait fraction (near 0: the model is the bottleneck; near 1: the data)."""
    total = time.perf_counter() - meter.start
    rate = meter.samples * accelerator.num_processes / max(total, 1e-9)
    counts = dataset.frame_counts()
    accelerator.print(
        f"done: {meter.samples} samples per rank in {total:.1f} s, samples/s {rate:.1f} "
        f"frames/s {rate * frames_per_sample:.1f} (all ranks), data-wait fraction "
        f"{meter.wait_s / max(total, 1e-9):.3f}, rank 0 frames decoded {counts['frames_decoded']} "
        f"delivered {counts['frames_delivered']}"
    )


def main(args: argparse.Namespace) -> None:
    stop = StopRequest()
    accelerator = Accelerator()
    set_seed(args.seed)  # the same initial weights on every rank
    dataset, loader = make_data(args, accelerator)
    cameras = dataset.meta.camera_keys
    frames_per_sample = sum(window(args.delta_timestamps, k) for k in cameras)
    policy = optimizer = None
    if not args.dummy:
        policy = build_policy(dataset, args.delta_timestamps)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr)
        policy, optimizer = accelerator.prepare(policy, optimizer)  # DDP wrap, device placement
    output_dir = Path(args.output_dir)
    progress = load_checkpoint(accelerator, output_dir, loader) if args.resume and not args.dummy else Progress()
    saved_step = progress.step
    record = open_record(args.record_samples, accelerator.process_index)
    accelerator.print(
        f"{accelerator.num_processes} process(es) on {accelerator.device}, {args.num_workers} loader "
        f"workers each, batch {args.batch_size} per rank, from step {progress.step}"
    )
    meter = Meter()
    # islice stops after the last step without fetching (and decoding) one more batch
    for batch in itertools.islice(
        batches(loader, dataset, progress, args.epochs, meter), max(0, args.steps - progress.step)
    ):
        if record:
            record.write(
                json.dumps(
                    {
                        "step": progress.step + 1,
                        "epoch": progress.epoch,
                        "world": accelerator.num_processes,
                        "index": batch["index"].tolist(),
                    }
                )
                + "\n"
            )
        loss = None if policy is None else train_step(accelerator, policy, optimizer, batch, cameras)
        progress.step += 1
        if progress.step % args.log_every == 0 or progress.step == args.steps:
            log_step(accelerator, progress, loss, meter, frames_per_sample)
        if policy is not None and (progress.step % args.save_every == 0 or progress.step == args.steps):
            kill = progress.step == args.debug_kill_at_step
            accelerator.print(f"saved {save_checkpoint(accelerator, output_dir, progress, loader, kill)}")
            saved_step = progress.step
        if stop_agreed(accelerator, stop):
            accelerator.print(f"stopping after step {progress.step} on {STOP_SIGNAL.name}")
            break
    if policy is not None and saved_step != progress.step:  # a stop signal or --epochs ended it between checkpoints
        accelerator.print(f"saved {save_checkpoint(accelerator, output_dir, progress, loader)}")
    if record:
        record.close()
    summarise(accelerator, dataset, meter, frames_per_sample)
    accelerator.end_training()
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)  # the run is over: a late request must not kill it at shutdown


if __name__ == "__main__":
    main(parse_args())
