"""Which torch a torchcodec is built for: one clear message for a mismatched pair."""

import pytest

from robostream.video.versions import mismatch, torch_for_torchcodec


@pytest.mark.parametrize(
    "torchcodec,torch",
    [
        ("0.1.0", "2.5"),
        ("0.5.0", "2.7"),
        ("0.7.1", "2.8"),
        ("0.9.0", "2.9"),
        ("0.10.0", "2.10"),
        ("0.11.1", "2.11"),
        ("0.13.0+cpu", "2.13"),
        ("0.0.3", None),
        ("1.0.0", None),
    ],
)
def test_the_torch_release_each_torchcodec_is_built_for(torchcodec, torch):
    assert torch_for_torchcodec(torchcodec) == torch


def test_pairs_that_go_together_pass_and_others_say_what_to_install():
    assert mismatch("2.11.0", "0.11.1") is None  # lerobot 0.6.1's pair
    assert mismatch("2.13.0+cpu", "0.13.0+cpu") is None  # ours
    assert mismatch("2.13.0", "0.0.3") is None  # unknown to the table: no verdict
    message = mismatch("2.13.0+cpu", "0.11.1")
    assert message.startswith("torch 2.13.0+cpu with torchcodec 0.11.1: torchcodec 0.11.1 is built for torch 2.11")
    assert "torchcodec 0.13" in message and "video_backend='pyav'" in message
