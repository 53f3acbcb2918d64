"""Planning cost at cluster scale: what every rank and DataLoader worker computes before its first sample, and what
a checkpoint (state_dict) and an elastic resume cost, for many consumers over a large dataset.

Run from the repository root on a dataset made by benchmarks/make_scale_dataset.py, e.g.

    .venv/bin/python benchmarks/plan_scale.py /work/scale/ds100k --layouts 8x2 64x8 --resume_on 63x8

For each layout (ranks x workers) it builds the streaming dataset as rank 0 of that layout (construction reads the
metadata only), then times, in this one process:
  * plan: `epoch_plan` (episode permutation, cut into C canonical streams, segments, quotas), what each worker runs
    at the start of every epoch;
  * first pick: a worker's iterator up to its first (stream, piece, position) pick (pool schedules of its streams);
  * state_dict: the loader's checkpoint arithmetic after 1000 batches (every consumer's segment positions) and the
    JSON size of the state;
  * elastic resume: `load_state_dict` + `epoch_plan` on the `--resume_on` layout (re-cut of what remains).
Times are the best of `--repeat` runs (default 3).
"""

from __future__ import annotations

import argparse
import json
import time

from robostream import StreamingLeRobotDataset
from robostream.datasets.epoch_iterator import EpochIterator


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _layout(text: str) -> tuple[int, int]:
    ranks, workers = text.lower().split("x")
    return int(ranks), int(workers)


def measure(root: str, ranks: int, workers: int, resume_on: tuple[int, int], repeat: int) -> dict:
    started = time.perf_counter()
    dataset = StreamingLeRobotDataset(root=root, rank=0, world_size=ranks, return_uint8=True)
    construct_s = time.perf_counter() - started
    plan_s, plan = _best(lambda: dataset.epoch_plan(ranks, workers), repeat)

    def first_pick():
        iterator = EpochIterator(
            plan,
            role=0,
            worker=0,
            sources=dataset.sources,
            schema=None,
            mixture_batches=None,
            reading=dataset.reading,
            seed=dataset.seed,
            epoch=dataset.epoch,
            pool_size=dataset.streams.pool_size,
            prefetch_pieces=0,
        )
        return next(iterator._picks(plan.positions[iterator.rows]))

    pick_s, _ = _best(first_pick, repeat)
    batches, batch_size = 1000, 32

    def checkpoint():
        return dataset.state_dict(batches=batches, batch_size=batch_size, num_workers=workers)

    state_s, state = _best(checkpoint, repeat)
    new_ranks, new_workers = resume_on

    def resume():
        other = StreamingLeRobotDataset(root=root, rank=0, world_size=new_ranks, return_uint8=True)
        other.load_state_dict(state)
        return other.epoch_plan(new_ranks, new_workers)

    resume_s, resumed = _best(resume, 1)
    return {
        "episodes": len(dataset.episodes),
        "frames": int(dataset.lengths.sum()),
        "layout": f"{ranks}x{workers}",
        "consumers": ranks * workers,
        "canonical_streams": len(plan.pieces),
        "construct_s": round(construct_s, 3),
        "plan_s": round(plan_s, 3),
        "first_pick_s": round(pick_s, 3),
        "state_dict_s": round(state_s, 3),
        "state_json_kb": round(len(json.dumps(state)) / 1024, 1),
        "resume_layout": f"{new_ranks}x{new_workers}",
        "resume_s": round(resume_s, 3),
        "segments_after_resume": len(resumed.segments),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--layouts", nargs="+", default=["8x2", "64x8"])
    parser.add_argument("--resume_on", default="63x8")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = [measure(args.root, *_layout(text), _layout(args.resume_on), args.repeat) for text in args.layouts]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
