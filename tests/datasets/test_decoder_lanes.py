"""Each live streaming piece decodes on decoders of its own (a lane, video/cache.py): its forward runs of frames
continue where the last one stopped, so a piece seeks once per camera, when it goes live, however the pool
interleaves the pieces that share a file."""

from __future__ import annotations

from robostream import StreamingLeRobotDataset
from robostream.datasets.stream_options import StreamOptions


def test_a_piece_seeks_once_per_camera_however_the_pool_interleaves_it(av1_root):
    # decode_ahead 2: a piece's frames come in runs of 2, many runs per piece, from files several pieces share
    dataset = StreamingLeRobotDataset(root=av1_root, seed=0, streams=StreamOptions(decode_ahead=2, pool_size=4))
    samples = sum(1 for _ in dataset)
    pieces = sum(len(stream) for stream in dataset.epoch_plan(1, 1).pieces)
    stats = dataset.reading.decoders.stats()
    cameras = len(dataset.meta.video_keys)
    assert samples == dataset.meta.info.total_frames
    assert stats["decoder_calls"] >= 3 * pieces * cameras  # runs interleave: a shared decoder would seek at each
    assert stats["seeks"] <= pieces * cameras, stats
