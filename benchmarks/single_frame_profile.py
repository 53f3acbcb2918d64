"""Where a `single`-mode sample's time goes in the streaming loader (BENCHMARKS.md, issue 13).

    PYTHONPATH=. .venv/bin/python benchmarks/single_frame_profile.py ROOT [--batches 150] [--decode-ahead 4]

Per sample, all in one process pinned to one core (what one DataLoader worker has on a machine with as many
cores as workers):
- limit: the camera files decoded front to back (torchcodec, 32 frames per call): the decode limit per core;
- decoder: time inside torchcodec's frame calls while the loader runs (includes its seeks);
- lookup + layout: the rest of the decode path (timestamp lookup, tolerance check, the CHW layout copy);
- assembly: everything else of StreamingDataLoader(num_workers=0) (rows, batch assembly, bookkeeping);
then the real loader with 2 workers on the whole machine: IPC + main process = 1 - its rate / (2 x one worker's).
The decoder's frame calls are timed by wrapping them here (a measurement harness, not a library hook).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np


def _limit_per_core(root: str, frames: int) -> float:
    from torchcodec.decoders import VideoDecoder

    from robostream.format.metadata import load_metadata

    meta = load_metadata(root)
    files = sorted({meta.video_file(int(e), k) for k in meta.video_keys for e in meta.episodes.episode_index})
    decoded, seconds = 0, 0.0
    for relative in files:
        decoder = VideoDecoder(str(Path(root) / relative), seek_mode="approximate")
        n = min(frames // len(files), decoder.metadata.num_frames)
        started = time.perf_counter()
        for start in range(0, n, 32):
            decoder.get_frames_at(indices=list(range(start, min(n, start + 32))))
        seconds += time.perf_counter() - started
        decoded += n
    return decoded / seconds


def _one_core(root: str, batches: int, decode_ahead: int) -> dict[str, float]:
    import robostream.video.decoder as decoder_module
    from robostream.datasets.loader import StreamingDataLoader
    from robostream.datasets.stream_options import StreamOptions
    from robostream.datasets.streaming import StreamingLeRobotDataset

    inner = {"s": 0.0}
    original = decoder_module.TorchCodecVideoDecoder.get_frames_by_index

    def timed(self, indices):
        started = time.perf_counter()
        try:
            return original(self, indices)
        finally:
            inner["s"] += time.perf_counter() - started

    decoder_module.TorchCodecVideoDecoder.get_frames_by_index = timed
    dataset = StreamingLeRobotDataset(root=root, return_uint8=True, streams=StreamOptions(decode_ahead=decode_ahead))
    batches_iter = iter(StreamingDataLoader(dataset, batch_size=32))
    next(batches_iter)  # start-up (first pieces' rows) is not part of the steady state
    decode_before, inner["s"] = dataset.cameras.decode_seconds, 0.0
    stats_before = dataset.cameras.cache.stats()
    started = time.perf_counter()
    samples = sum(len(b["index"]) for b in itertools.islice(batches_iter, batches))
    total = time.perf_counter() - started
    decode = dataset.cameras.decode_seconds - decode_before
    stats = dataset.cameras.cache.stats()
    frames = samples * len(dataset.meta.video_keys)
    decoder_module.TorchCodecVideoDecoder.get_frames_by_index = original
    return {
        "samples": samples,
        "ms_per_sample": 1e3 * total / samples,
        "decoder_ms": 1e3 * inner["s"] / samples,
        "lookup_layout_ms": 1e3 * (decode - inner["s"]) / samples,
        "assembly_ms": 1e3 * (total - decode) / samples,
        "decoder_calls_per_100_frames": 100 * (stats["decoder_calls"] - stats_before["decoder_calls"]) / frames,
        "seeks_per_100_frames": 100 * (stats["seeks"] - stats_before["seeks"]) / frames,
    }


def _two_workers(root: str, batches: int, decode_ahead: int) -> float:
    from robostream.datasets.loader import StreamingDataLoader
    from robostream.datasets.stream_options import StreamOptions
    from robostream.datasets.streaming import StreamingLeRobotDataset

    dataset = StreamingLeRobotDataset(root=root, return_uint8=True, streams=StreamOptions(decode_ahead=decode_ahead))
    batches_iter = iter(StreamingDataLoader(dataset, batch_size=32, num_workers=2))
    for _ in range(4):
        next(batches_iter)
    started = time.perf_counter()
    samples = sum(len(b["index"]) for b in itertools.islice(batches_iter, batches))
    return samples / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--decode-ahead", type=int, default=4)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    loader_rate = _two_workers(args.root, args.batches, args.decode_ahead)  # the whole machine first
    os.sched_setaffinity(0, {cores[0]})
    import torch

    torch.set_num_threads(1)  # as in a DataLoader worker; idle intra-op threads would spin on the one core
    from robostream.format.metadata import load_metadata

    cameras = len(load_metadata(args.root).video_keys)
    limit = _limit_per_core(args.root, 2400)
    one = _one_core(args.root, args.batches, args.decode_ahead)
    one_rate = 1e3 / one["ms_per_sample"]
    result = {
        "root": args.root,
        "decode_ahead": args.decode_ahead,
        "cores": len(cores),
        "limit_frames_per_s_per_core": limit,
        "limit_ms_per_sample": 1e3 * cameras / limit,
        **one,
        "one_core_samples_per_s": one_rate,
        "two_workers_samples_per_s": loader_rate,
        "ipc_main_share": 1 - loader_rate / (2 * one_rate),
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
