"""Steps/s and data wait per step: `robostream train` (map-style and streaming) vs `lerobot-train`, same config.

Run in lerobot's environment from the repository root; runs alternate between the commands so drift hits all:

    .venv-lerobot/bin/python benchmarks/train_vs_lerobot.py --root /path/to/dataset --steps 40 --skip 10

Every run: the same dataset (local), batch 8, 2 DataLoader workers, seed 0, no checkpoints, log every step; a small
CPU ACT (width 64, one layer each, ResNet-18 from random init) and a small Diffusion Policy (U-Net widths 32/64),
with lerobot's default augmentations off and on (`--dataset.image_transforms.enable=true`). Both commands print
lerobot's MetricsTracker line every step; per run this reports the mean `data_s` (time waiting for the batch,
including robostream's uint8 -> float and device-side augmentations) and `updt_s` (forward, backward, step) over the
steps after the first `--skip` (worker start-up excluded), and steps/s = 1 / (data_s + updt_s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

POLICIES = {
    "act": [
        "--policy.type=act",
        "--policy.dim_model=64",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=128",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
    ],
    "diffusion": [
        "--policy.type=diffusion",
        "--policy.down_dims=[32,64]",
        "--policy.use_group_norm=true",
        "--policy.diffusion_step_embed_dim=32",
        "--policy.spatial_softmax_num_keypoints=8",
        "--policy.horizon=8",
        "--policy.n_action_steps=4",
        "--policy.n_obs_steps=2",
    ],
}
COMMANDS = {
    "lerobot-train": ["-m", "lerobot.scripts.lerobot_train"],
    "robostream map-style": ["-m", "robostream.lerobot.train"],
    "robostream streaming": ["-m", "robostream.lerobot.train", "--dataset.streaming=true"],
}
STEP_LINE = re.compile(r"step:(\d+) .*updt_s:([\d.]+) data_s:([\d.]+)")


def run(command: list[str], args: argparse.Namespace, policy: str, augment: bool, out: Path) -> dict[str, float]:
    argv = [
        sys.executable,
        *command,
        *POLICIES[policy],
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--policy.pretrained_backbone_weights=null",
        "--dataset.repo_id=bench/local",
        f"--dataset.root={args.root}",
        "--batch_size=8",
        "--num_workers=2",
        "--seed=0",
        f"--steps={args.steps}",
        "--log_freq=1",
        "--save_checkpoint=false",
        f"--output_dir={out}",
        f"--dataset.image_transforms.enable={str(augment).lower()}",
    ]
    if augment and "--dataset.streaming=true" not in command and command[1] == "robostream.lerobot.train":
        argv.append("--robostream.augment_on=device")  # map-style batches are torch's collate: augment after it
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    steps = [(int(m[1]), float(m[2]), float(m[3])) for m in STEP_LINE.finditer(proc.stderr + proc.stdout)]
    kept = [(u, d) for step, u, d in steps if step > args.skip]
    if not kept:
        raise SystemExit(f"no step lines after step {args.skip} in the output of {' '.join(argv)}")
    update = sum(u for u, _ in kept) / len(kept)
    data = sum(d for _, d in kept) / len(kept)
    return {"data_ms": 1000 * data, "update_ms": 1000 * update, "steps_per_s": 1 / (update + data)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (worker start-up)")
    parser.add_argument("--policies", default="act,diffusion")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            for augment in (False, True):
                for name, command in COMMANDS.items():
                    out = Path(tmp) / f"{policy}-{augment}-{name.replace(' ', '-')}"
                    row = {
                        "policy": policy,
                        "augment": augment,
                        "command": name,
                        **run(command, args, policy, augment, out),
                    }
                    results.append(row)
                    print(
                        f"{policy:9s} aug={'on ' if augment else 'off'} {name:22s} data {row['data_ms']:7.1f} ms  "
                        f"update {row['update_ms']:7.1f} ms  {row['steps_per_s']:5.2f} steps/s",
                        flush=True,
                    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
