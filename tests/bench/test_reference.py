"""The decode reference, raw and laid out, over RGB and depth (gray12) cameras."""

from __future__ import annotations

from pathlib import Path

import pytest

from robostream.bench.reference import decode_reference, lay_out
from robostream.synth import SynthConfig, generate

RGB_AND_DEPTH = SynthConfig(
    episodes=2, cameras=1, height=48, width=64, fps=10, episode_length=6, state_dim=2, codec="av1", depth=1, seed=4
)


@pytest.fixture(scope="module")
def rgb_and_depth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("ref") / "ds", RGB_AND_DEPTH)


def _frames(root: Path) -> int:
    from robostream.bench.reference import _frame_counts, _metadata, _planes

    meta = _metadata(str(root))
    planes = _planes(meta)
    assert sorted(set(planes.values())) == ["gray12", "rgb"]
    return sum(_frame_counts(meta, "torchcodec", "cpu", planes).values())


def test_the_laid_out_reference_decodes_the_frames_the_raw_one_does(rgb_and_depth_root):
    """Laid out, each camera's frames (RGB uint8, depth int16 codes) are also laid out as contiguous (C, H, W) into
    a batch's slots: the same frames decoded, named as the laid-out figure."""
    raw = decode_reference(str(rgb_and_depth_root), processes=1)
    laid = decode_reference(str(rgb_and_depth_root), processes=1, laid_out=True)
    assert raw["reference"] == "decode" and laid["reference"] == "decode_laid_out" and laid["batch_frames"] == 32
    assert laid["frames"] == raw["frames"] == _frames(rgb_and_depth_root)  # every frame of both cameras
    assert laid["frames_per_s"] > 0 and raw["frames_per_s"] > 0


def test_frames_are_laid_out_into_the_batch_slots(rgb_and_depth_root):
    """The laid-out reference's copy: a decoder's (N, C, H, W) output (a view of packed pixels) into a batch's
    contiguous slots, a batch at a time: the slots then hold the last run's frames, equal to the decoded ones."""
    import torch

    from robostream.bench.reference import _metadata
    from robostream.datasets.cameras import open_dataset_video

    meta = _metadata(str(rgb_and_depth_root))
    decoder = open_dataset_video(meta, meta.video_file(0, "observation.images.cam0"), None, "cpu", plane="rgb")
    frames, _ = decoder.get_frames_by_index(range(decoder.num_frames))
    assert not frames.is_contiguous() and decoder.num_frames > 4  # packed pixels seen as (N, C, H, W)
    batch = torch.zeros((4, *frames.shape[1:]), dtype=frames.dtype)
    lay_out(frames, batch)
    last = (decoder.num_frames - 1) // 4 * 4  # the last run's first frame
    assert batch.is_contiguous() and torch.equal(batch[: decoder.num_frames - last], frames[last:])
