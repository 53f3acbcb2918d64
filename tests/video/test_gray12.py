"""Depth maps: the 12-bit gray plane of lerobot's lossless HEVC gray12le files, as the codes FFmpeg decodes.

lerobot 0.6.1 quantises depth to codes 0..4095 and writes them with x265 lossless=1, GOP 2 (an open GOP).
`open_video_decoder(..., plane="gray12")` must return them as int16 (N, 1, H, W) with either backend asked for
(both decode with PyAV on the CPU), every frame asked for in any order equal to a straight decode from the start.
Those are the codes written, exactly in an all-intra file; x265 is lossless only up to a few pixels once it
predicts between frames (tests/video/encoded.py), so there they must be equal almost everywhere: an 8-bit detour
or a neighbouring frame would differ nearly everywhere.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from robostream.errors import VideoDecodeError
from robostream.video.decoder import BACKENDS, open_video_decoder
from tests.helpers import decode_at_timestamps
from tests.video.encoded import FPS, encode

FRAMES = 24


def _codes(frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(frames.astype(np.int16)).unsqueeze(1)


@pytest.fixture(scope="module")
def depth(tmp_path_factory):
    """lerobot's depth file (GOP 2) and the codes a straight decode from the start gives."""
    path = tmp_path_factory.mktemp("depth") / "depth.mp4"
    written = _codes(encode(path, "depth", count=FRAMES, size=32))
    codes, pts = open_video_decoder(path, "pyav", plane="gray12").get_frames_by_index(list(range(FRAMES)))
    assert np.allclose(pts, np.arange(FRAMES) / FPS, rtol=0, atol=1e-9)
    assert (codes == written).double().mean() > 0.999
    return path, codes


def test_an_all_intra_file_gives_the_codes_written_exactly(tmp_path):
    path = tmp_path / "intra.mp4"
    written = _codes(encode(path, "depth_intra", count=6, size=32))
    frames, _ = open_video_decoder(path, plane="gray12").get_frames_by_index([3, 0, 5, 1, 2, 4])
    assert frames.dtype == torch.int16 and frames.shape == (6, 1, 32, 32)
    assert torch.equal(frames, written[[3, 0, 5, 1, 2, 4]]) and int(written.max()) > 4000  # 12 bits, all of them


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_frame_in_any_order_is_the_straight_decode(depth, backend):
    path, codes = depth
    decoder = open_video_decoder(path, backend, plane="gray12")
    order = list(range(FRAMES))
    random.Random(3).shuffle(order)  # every frame alone: half of them lead the keyframe after them
    for i in order:
        frames, pts = decoder.get_frames_by_index([i])
        assert torch.equal(frames[0], codes[i]) and pts[0] == pytest.approx(i / FPS, abs=1e-9), f"frame {i}"
    rng = random.Random(4)
    for _ in range(6):
        indices = [rng.randrange(FRAMES) for _ in range(rng.randint(1, 5))]
        assert torch.equal(decoder.get_frames_by_index(indices)[0], codes[indices]), indices


def test_lookup_by_timestamps_keeps_the_codes(depth):
    path, codes = depth
    times = [0.7, 0.1, 0.1, 2.3, 0.0]
    frames = decode_at_timestamps(open_video_decoder(path, plane="gray12"), times, tolerance_s=1e-4)
    assert torch.equal(frames, codes[[7, 1, 1, 23, 0]])


def test_a_gpu_device_decodes_depth_on_the_cpu(depth):
    path, codes = depth
    decoder = open_video_decoder(path, "torchcodec", device="cuda", plane="gray12")
    frames, _ = decoder.get_frames_by_index([5])
    assert frames.device.type == "cpu" and torch.equal(frames[0], codes[5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gray12_request_on_an_rgb_video_names_the_file_and_the_fix(tmp_path, backend):
    path = tmp_path / "rgb.mp4"
    encode(path, "hevc_g2", count=4, size=32)
    with pytest.raises(VideoDecodeError, match=r"rgb\.mp4.*is_depth_map.*not a gray12 stream.*'yuv420p'.*Re-encode"):
        open_video_decoder(path, backend, plane="gray12")


def test_an_unknown_plane_is_refused(depth):
    with pytest.raises(ValueError, match=r"plane='depth'.*'rgb', 'gray12'"):
        open_video_decoder(depth[0], plane="depth")
