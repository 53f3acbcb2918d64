import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robostream.plan.piece import NO_WINDOW, piece_geometry
from robostream.plan.windows import window_indices


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(1, 60),
    data=st.data(),
    stride=st.integers(1, 7),
    offsets=st.lists(st.integers(-9, 9), min_size=1, max_size=5),
)
def test_every_frame_once_in_residue_order_with_its_window_clamped(length, data, stride, offsets):
    first = data.draw(st.integers(0, length))
    stop = data.draw(st.integers(first, length))
    window = np.asarray(offsets, dtype=np.int64)
    geometry = piece_geometry(
        first=first, stop=stop, stride=stride, episode_length=length, camera_offsets={"a": window, "b": NO_WINDOW}
    )
    order = geometry.sample_frames.tolist()
    assert sorted(order) == list(range(first, stop))  # every frame of the piece, once
    keys = [(f % stride, f) for f in order] if stride > 1 else order
    assert keys == sorted(keys)  # by residue class, forward within each
    assert geometry.camera_frames["a"].shape == (stop - first, len(offsets))
    assert geometry.camera_frames["b"].tolist() == [[f] for f in order]
    for i, frame in enumerate(order):  # each sample's window is the one a single sample asks for
        assert geometry.camera_frames["a"][i].tolist() == window_indices(frame, 0, length, window)[0].tolist()


def test_a_piece_outside_its_episode_is_refused():
    with pytest.raises(ValueError, match=r"piece \[5, 12\) does not lie in an episode of 10 frames"):
        piece_geometry(first=5, stop=12, stride=1, episode_length=10, camera_offsets={})
