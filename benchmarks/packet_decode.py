"""Frames decoded from their packets' bytes alone (no file object, no AVIO) vs torchcodec: equal, and at what CPU.

A remote map-style read of one random frame fetches at least 64 KiB today: torchcodec reads a file object through
FFmpeg's 64 KiB buffer and fills it whole (BENCHMARKS.md, ninth session). The packet index (video/packet_index.py)
knows every packet's offset and size, so a decoder could be fed exactly the keyframe-to-frame packets instead
(bytes per frame ~ the GOP's share). This measures whether that path gives torchcodec's frames bit for bit and what
it costs: for random frames of one mp4, a PyAV codec context (made once from the stream's parameters, flushed
between frames) fed av.Packets cut from the file's bytes, converted to rgb24, against torchcodec's `get_frames_at`
(approximate seek mode, as robostream opens files). Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/packet_decode.py VIDEO.mp4 --frames 200

Prints one JSON line: the largest pixel difference, and CPU ms per frame for each path.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter
from torchcodec.decoders import VideoDecoder

from robostream.video.packet_index import PacketIndex, read_packet_index


def _sizes(path: Path, index: PacketIndex) -> np.ndarray:
    """Each packet's size, in decode order (PyAV's demuxer; the offsets must be the index's)."""
    with av.open(str(path)) as container:
        packets = [(p.pos, p.size) for p in container.demux(container.streams.video[0]) if p.size]
    offsets, sizes = np.array([p for p, _ in packets]), np.array([s for _, s in packets])
    if not np.array_equal(offsets, index.pos):
        raise SystemExit(f"{path}: PyAV's packet offsets differ from the packet index's")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video", type=Path)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data = args.video.read_bytes()
    with open(args.video, "rb") as file:
        index = read_packet_index(file)
    if index is None:
        raise SystemExit(f"{args.video}: no packet index")
    sizes = _sizes(args.video, index)
    with av.open(str(args.video)) as container:
        stream = container.streams.video[0]
        codec, extradata, time_base = stream.codec_context.name, stream.codec_context.extradata, stream.time_base
    context = av.CodecContext.create(codec, "r")
    context.extradata = extradata
    context.thread_count = 1
    reformatter = VideoReformatter()  # one conversion context for every frame (to_ndarray(format=) makes one each)

    def from_packets(target: int) -> np.ndarray:
        key = int(index.keyframes[np.searchsorted(index.keyframes, target, side="right") - 1])
        wanted, found = int(index.pts[target]), None
        for i in range(key, target + 1):
            packet = av.Packet(data[index.pos[i] : index.pos[i] + sizes[i]])
            packet.pts, packet.dts, packet.time_base = int(index.pts[i]), int(index.dts[i]), time_base
            found = next((f for f in context.decode(packet) if f.pts == wanted), found)
        if found is None:  # a decoder that holds frames back: drain it
            found = next((f for f in context.decode(None) if f.pts == wanted), None)
        context.flush_buffers()
        if found is None:
            raise SystemExit(f"frame {target} did not come out of its packets")
        return reformatter.reformat(found, format="rgb24").to_ndarray()

    torchcodec = VideoDecoder(str(args.video), dimension_order="NHWC", seek_mode="approximate")
    targets = np.random.default_rng(args.seed).integers(0, len(index.pos), args.frames).tolist()
    worst, packets_s, torchcodec_s = 0, 0.0, 0.0
    for target in targets:
        started = time.process_time()
        mine = from_packets(target)
        packets_s += time.process_time() - started
        started = time.process_time()
        theirs = torchcodec.get_frames_at([target]).data[0].numpy()
        torchcodec_s += time.process_time() - started
        worst = max(worst, int(np.abs(mine.astype(np.int16) - theirs.astype(np.int16)).max()))
    print(
        json.dumps(
            {
                "codec": codec,
                "frames": len(targets),
                "max_abs_difference": worst,
                "packets_cpu_ms_per_frame": round(1e3 * packets_s / len(targets), 3),
                "torchcodec_cpu_ms_per_frame": round(1e3 * torchcodec_s / len(targets), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
