"""Frames by index from files whose keyframes lead frames shown before them (HEVC open GOP, as lerobot writes depth
and HEVC RGB cameras), and from H.264 with B-frames, with both backends.

FFmpeg's mp4 seek picks keyframes by decode time, so a seek to a leading frame's time starts at the keyframe after
it and the frame is dropped: the decoders must start at the last keyframe shown at or before it instead. Every
frame, asked for alone in random order, in arbitrary sets or by nearby times, must be the one a straight decode
from the start gives (bit for bit), at its own pts.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from robostream.video.decoder import BACKENDS, open_video_decoder
from tests.video.encoded import FPS, encode

FRAMES = 30


@pytest.fixture(scope="module", params=["depth", "hevc_g2", "hevc_g10", "h264_bframes"])
def video(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "video.mp4"
    return request.param, path, encode(path, request.param, count=FRAMES)


def straight_decode(path, backend) -> torch.Tensor:
    """Every frame, decoded in order from the start (no seek to get wrong)."""
    frames, pts = open_video_decoder(path, backend).get_frames_by_index(list(range(FRAMES)))
    assert np.allclose(pts, np.arange(FRAMES) / FPS, rtol=0, atol=1e-9)
    return frames


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_frame_alone_in_random_order_is_the_one_asked_for(video, backend):
    kind, path, source = video
    reference = straight_decode(path, backend)
    if kind != "depth":  # each decoded frame is its own source frame, not a neighbour (gray: see test_gray12)
        error = (reference.permute(0, 2, 3, 1).float()[:, None] - torch.from_numpy(source).float()[None]).abs()
        assert torch.equal(error.mean(dim=(2, 3, 4)).argmin(dim=1), torch.arange(FRAMES))
    decoder = open_video_decoder(path, backend)
    order = list(range(FRAMES))
    random.Random(1).shuffle(order)
    for i in order:
        frames, pts = decoder.get_frames_by_index([i])
        assert pts[0] == pytest.approx(i / FPS, abs=1e-9), f"{kind} {backend}: frame {i}"
        assert torch.equal(frames[0], reference[i]), f"{kind} {backend}: frame {i}"
    assert decoder.seeks <= len(order)  # one per jump, however many seeks it took to land before the frame


@pytest.mark.parametrize("backend", BACKENDS)
def test_arbitrary_index_sets_and_nearby_times(video, backend):
    kind, path, _ = video
    reference = straight_decode(path, backend)
    decoder = open_video_decoder(path, backend)
    rng = random.Random(2)
    for _ in range(8):
        indices = [rng.randrange(FRAMES) for _ in range(rng.randint(1, 6))]  # any order, repeats
        frames, pts = decoder.get_frames_by_index(indices)
        assert np.allclose(pts, np.array(indices) / FPS, rtol=0, atol=1e-9), f"{kind} {backend}: {indices}"
        assert torch.equal(frames, reference[indices]), f"{kind} {backend}: {indices}"
        times = np.array(indices) / FPS + np.array([rng.uniform(-0.4, 0.4) for _ in indices]) / FPS
        frames, pts = decoder.get_frames_near_times(times.tolist())
        assert np.allclose(pts, np.array(indices) / FPS, rtol=0, atol=1e-9), f"{kind} {backend}: {times}"
        assert torch.equal(frames, reference[indices])


def test_torchcodec_finds_frames_by_pts_only_in_files_that_need_it(video):
    kind, path, _ = video
    decoder = open_video_decoder(path, "torchcodec")
    # HEVC open GOP: the frame index from the mp4's tables; H.264 (closed GOP) keeps the header-only open.
    assert decoder.seek_mode == ("approximate" if kind == "h264_bframes" else "custom_frame_mappings")
    assert decoder.num_frames == FRAMES and decoder.end_s == pytest.approx(FRAMES / FPS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_object_source_gives_the_same_frames(video, backend):
    kind, path, _ = video
    reference = straight_decode(path, backend)
    with open(path, "rb") as file:
        decoder = open_video_decoder(file, backend, name="camera.mp4")
        order = list(range(FRAMES))[::-3]
        frames, pts = decoder.get_frames_by_index(order)
        assert torch.equal(frames, reference[order]), f"{kind} {backend}"


def test_pyav_starts_at_the_last_keyframe_shown_at_or_before_the_target(video):
    """With the mp4's index, one seek lands on that keyframe itself: not a later one (the frame would be dropped)
    nor an earlier one (frames decoded in vain, as the back-off without an index does)."""
    import av

    kind, path, _ = video
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        keyframes = sorted(float(p.pts * stream.time_base) for p in container.demux(stream) if p.is_keyframe)
    decoder = open_video_decoder(path, "pyav")
    for i in range(FRAMES):
        decoder._seek_to_or_before(i / FPS)
        expected = max(k for k in keyframes if k <= i / FPS + 1e-9)
        assert float(decoder._pending.time) == pytest.approx(expected, abs=1e-9), f"{kind}: frame {i}"
