"""Frame layout (packed HWC decoder output -> contiguous CHW) and the frame pool."""

import numpy as np
import torch

from robostream.video.layout import FramePool, copy_chw, frames_chw, gather_chw


def _decoded(n=5, h=6, w=10):
    packed = torch.randint(0, 255, (n, h, w, 3), dtype=torch.uint8)
    return packed, packed.permute(0, 3, 1, 2)  # what decoders hand out: an NCHW view of NHWC memory


def test_layouts_equal_torch_and_are_contiguous():
    packed, frames = _decoded()
    picks = np.array([3, 0, 3, 4])
    stacked = gather_chw(frames, picks)
    assert stacked.is_contiguous() and torch.equal(stacked, frames[torch.from_numpy(picks)])
    separate = frames_chw(frames, picks)
    assert all(f.is_contiguous() and torch.equal(f, frames[p]) for f, p in zip(separate, picks.tolist()))
    target = torch.empty(3, 6, 10, dtype=torch.uint8)
    copy_chw(target, frames[1].float().to(torch.uint8))  # not a packed view: torch's copy
    assert torch.equal(target, frames[1])


def test_the_pool_reuses_only_whole_frames_and_respects_its_cap():
    packed, frames = _decoded()
    pool = FramePool(max_bytes=2 * 3 * 6 * 10)
    first = frames_chw(frames, np.array([0, 1, 2]), pool)
    pool.give(first + [gather_chw(frames, np.array([0, 1]))[0]])  # a view of a larger tensor is never kept
    again = frames_chw(frames, np.array([4, 3, 2]), pool)
    assert pool.reused == 2  # the cap kept two of the three whole frames
    assert sum(any(a.data_ptr() == f.data_ptr() for f in first) for a in again) == 2
    assert all(torch.equal(a, frames[p]) for a, p in zip(again, [4, 3, 2]))


def test_frames_split_in_runs_land_in_their_targets(monkeypatch):
    # Small frames are split several at a time through a scratch buffer: picks unordered, repeated, sparse, and
    # runs cut at the scratch's size (3 frames of 6x10 per run here) must each land in their own target.
    import robostream.video.layout as layout

    packed, frames = _decoded(n=12)
    monkeypatch.setattr(layout, "SPLIT_BYTES", 3 * 6 * 10 * 3)
    monkeypatch.setattr(layout, "SPLIT_RUN_MIN", 2)
    for picks in ([11, 0, 5, 5, 6, 7, 1, 2, 3, 10], [4], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]):
        out = frames_chw(frames, np.array(picks))
        assert all(torch.equal(f, frames[p]) for f, p in zip(out, picks)), picks
    monkeypatch.setattr(layout, "SPLIT_RUN_MIN", 4)  # 3 frames per run is too few: one split per frame
    assert torch.equal(gather_chw(frames, np.array([3, 1, 3])), frames[torch.tensor([3, 1, 3])])
