"""PieceReader on its own: a fake decode hands out (C, H, W) tensors tagged with their camera and frame, so every
frame a sample gets, every decoder call and every release can be checked without a video file.

The windows are built here the way the sample assembler builds them (frame + delta, clamped into the episode), and
the sample orders are written out: chronological, and the stride-2 order the streaming schedule uses for
overlapping windows (even frames, then odd ones)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robostream.datasets.piece_reader import PieceReader
from robostream.format.data_rows import EpisodeRows

EPISODE = 5
CAMERAS = {"cam_a": 1, "cam_b": 2}  # camera -> the tag its frames carry in channel 0


class FakeDecode:
    """Per requested camera one uint8 (N, 2, 1, 1) tensor: channel 0 the camera's tag, channel 1 the frame."""

    def __init__(self, rows: EpisodeRows) -> None:
        self.rows = rows
        self.calls: list[dict[str, list[int]]] = []

    def __call__(self, rows: EpisodeRows, frames_by_key):
        assert rows is self.rows, "the reader must hand its episode's rows to the decoder"
        self.calls.append({key: frames.tolist() for key, frames in frames_by_key.items()})
        return {
            key: torch.stack([frame_tensor(key, f) for f in frames.tolist()]) for key, frames in frames_by_key.items()
        }

    def decoded(self) -> list[tuple[str, int]]:
        return [(key, f) for call in self.calls for key, frames in call.items() for f in frames]


def frame_tensor(key: str, frame: int) -> torch.Tensor:
    return torch.tensor([CAMERAS[key], frame], dtype=torch.uint8).reshape(2, 1, 1)


def tag(frame: torch.Tensor) -> tuple[int, int]:
    return int(frame[0, 0, 0]), int(frame[1, 0, 0])


def episode_rows(length: int) -> EpisodeRows:
    return EpisodeRows(episode=EPISODE, columns={"index": np.arange(100, 100 + length)}, images={}, strings={})


def windows(sample_frames, length: int, deltas: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Per camera the (N, T) frames each sample needs: frame + delta, clamped into the episode."""
    frames = np.asarray(sample_frames, dtype=np.int64)[:, None]
    return {key: np.clip(frames + np.asarray(d, dtype=np.int64)[None, :], 0, length - 1) for key, d in deltas.items()}


def make_reader(sample_frames, length: int, deltas: dict[str, list[int]], decode_ahead: int):
    rows = episode_rows(length)
    decode = FakeDecode(rows)
    needed = windows(sample_frames, length, deltas)
    reader = PieceReader(rows, np.asarray(sample_frames, dtype=np.int64), needed, decode, decode_ahead, source=2)
    return reader, decode, needed


LENGTH = 12
CHRONOLOGICAL = list(range(2, 10))  # a piece of frames 2..9 of a 12-frame episode
STRIDE_2 = [2, 4, 6, 8, 3, 5, 7, 9]  # the same piece visited by residue class of stride 2
WINDOWS = {"cam_a": [-3, -1, 0], "cam_b": [0, 2]}  # past frames on one camera, a future frame on the other


def cases():
    for name, order in (("chronological", CHRONOLOGICAL), ("stride-2", STRIDE_2)):
        for ahead in (1, 3, 100):
            yield pytest.param(order, ahead, id=f"{name}-ahead{ahead}")


@pytest.mark.parametrize("order, ahead", list(cases()))
def test_each_sample_gets_its_window_and_each_frame_is_decoded_once(order, ahead):
    reader, decode, needed = make_reader(order, LENGTH, WINDOWS, ahead)
    first_seen: dict[tuple[str, int], torch.Tensor] = {}
    for position in range(len(order)):
        out = reader.window_frames(position)
        assert sorted(out) == sorted(WINDOWS)
        for key, frames in out.items():
            assert [tag(f) for f in frames] == [(CAMERAS[key], int(f)) for f in needed[key][position]], (key, position)
            for frame in frames:
                # the very tensor the decoder returned, shared by every sample that uses the frame
                assert first_seen.setdefault((key, tag(frame)[1]), frame) is frame
    decoded = decode.decoded()
    assert len(decoded) == len(set(decoded)), f"a frame was decoded twice: {decode.calls}"
    assert set(decoded) == {(k, int(f)) for k, rows in needed.items() for f in rows.reshape(-1)}
    assert reader.resident == 0 and all(not held for held in reader.frames.values())


@pytest.mark.parametrize("order, ahead", list(cases()))
def test_frames_are_released_after_their_last_use_and_resident_counts_what_is_held(order, ahead):
    reader, decode, needed = make_reader(order, LENGTH, WINDOWS, ahead)
    released: list[torch.Tensor] = []
    for position in range(len(order)):
        reader.window_frames(position, released)
        for key, held in reader.frames.items():
            later = set(needed[key][position + 1 :].reshape(-1).tolist())
            assert set(held) <= later, f"{key} holds frames no later sample needs after position {position}"
        assert reader.resident == sum(len(held) for held in reader.frames.values())
        assert reader.resident == len(decode.decoded()) - len(released)
    # every decoded frame released exactly once, the tensor itself
    assert sorted(tag(f) for f in released) == sorted((CAMERAS[k], f) for k, f in decode.decoded())
    assert len({id(f) for f in released}) == len(released)


def test_a_frame_is_released_with_the_sample_that_uses_it_last():
    reader, _, _ = make_reader(CHRONOLOGICAL, LENGTH, {"cam_a": [-1, 0]}, decode_ahead=3)
    released: list[torch.Tensor] = []
    reader.window_frames(0, released)  # frame 2 needs [1, 2]; frame 2 is still needed by frame 3's window
    assert [tag(f) for f in released] == [(1, 1)]
    assert sorted(reader.frames["cam_a"]) == [2, 3, 4] and reader.resident == 3
    reader.window_frames(1, released)  # [2, 3]
    assert [tag(f) for f in released] == [(1, 1), (1, 2)]
    assert sorted(reader.frames["cam_a"]) == [3, 4] and reader.resident == 2


def test_frames_are_dropped_without_a_released_list():
    reader, _, _ = make_reader(CHRONOLOGICAL, LENGTH, {"cam_a": [0]}, decode_ahead=4)
    reader.window_frames(0)
    assert sorted(reader.frames["cam_a"]) == [3, 4, 5] and reader.resident == 3


def test_missing_frames_are_decoded_in_look_ahead_batches_one_call_per_need():
    """decode_ahead=4, window [-1, 0]: a call brings the missing frames of the next 4 samples; the frame a call's
    last sample shares with the next sample is kept, not decoded again."""
    reader, decode, _ = make_reader(CHRONOLOGICAL, LENGTH, {"cam_a": [-1, 0]}, decode_ahead=4)
    calls_at = {}
    for position in range(len(CHRONOLOGICAL)):
        before = len(decode.calls)
        reader.window_frames(position)
        if len(decode.calls) > before:
            calls_at[position] = decode.calls[-1]
    assert calls_at == {0: {"cam_a": [1, 2, 3, 4, 5]}, 4: {"cam_a": [6, 7, 8, 9]}}


def test_the_look_ahead_follows_the_sample_order_not_the_frame_order():
    reader, decode, _ = make_reader(STRIDE_2, LENGTH, {"cam_a": [0]}, decode_ahead=3)
    for position in range(len(STRIDE_2)):
        reader.window_frames(position)
    assert decode.calls == [{"cam_a": [2, 4, 6]}, {"cam_a": [3, 5, 8]}, {"cam_a": [7, 9]}]


def test_a_call_asks_only_for_the_cameras_that_miss_frames():
    """cam_b looks 3 frames ahead (clamped at the episode's end), so near the end its frames are all held while
    cam_a still misses one: that call asks cam_a alone."""
    reader, decode, _ = make_reader(range(5), 5, {"cam_a": [0], "cam_b": [0, 3]}, decode_ahead=1)
    for position in range(5):
        reader.window_frames(position)
    assert decode.calls == [
        {"cam_a": [0], "cam_b": [0, 3]},
        {"cam_a": [1], "cam_b": [1, 4]},
        {"cam_a": [2], "cam_b": [2]},
        {"cam_a": [3]},
        {"cam_a": [4]},
    ]


@pytest.mark.parametrize("ahead", [0, -2])
def test_a_look_ahead_below_one_decodes_one_sample_at_a_time(ahead):
    reader, decode, _ = make_reader([0, 1, 2], 3, {"cam_a": [0]}, decode_ahead=ahead)
    for position in range(3):
        reader.window_frames(position)
    assert reader.decode_ahead == 1
    assert decode.calls == [{"cam_a": [0]}, {"cam_a": [1]}, {"cam_a": [2]}]


def test_missing_and_add_fill_the_reader_outside_window_frames():
    """The batch path: `missing` says what to decode (nothing once held), the frames are decoded elsewhere as one
    (N, C, H, W) tensor per camera and handed to `add`; window_frames then decodes nothing itself."""
    reader, decode, needed = make_reader(STRIDE_2, LENGTH, WINDOWS, decode_ahead=2)
    wanted = reader.missing([0])
    # samples 0 and 1 (frames 2 and 4): cam_a windows [0, 1, 2] and [1, 3, 4], cam_b [2, 4] and [4, 6]
    assert {k: v.tolist() for k, v in wanted.items()} == {"cam_a": [0, 1, 2, 3, 4], "cam_b": [2, 4, 6]}
    reader.add(wanted, {k: torch.stack([frame_tensor(k, f) for f in v.tolist()]) for k, v in wanted.items()})
    assert reader.resident == 8
    assert reader.missing([0]) == {} and reader.missing([1]) == {}
    for position in (0, 1):
        out = reader.window_frames(position)
        assert {k: [tag(f)[1] for f in v] for k, v in out.items()} == {k: needed[k][position].tolist() for k in WINDOWS}
    assert decode.calls == []
    # samples 2 and 3 (frames 6 and 8): cam_a [3, 5, 6] and [5, 7, 8] less 3, still held for frame 3's window;
    # cam_b [6, 8] and [8, 10] less 6
    assert {k: v.tolist() for k, v in reader.missing([2]).items()} == {"cam_a": [5, 6, 7, 8], "cam_b": [8, 10]}


def test_missing_covers_all_of_a_batchs_samples_of_the_piece_beyond_the_look_ahead():
    """A batch holding more of a piece's samples than the look-ahead covers gets them in one call per camera:
    from the first sample not held through the last one in the batch (no decoder call of its own later)."""
    reader, decode, needed = make_reader(CHRONOLOGICAL, LENGTH, {"cam_a": [0]}, decode_ahead=2)
    wanted = reader.missing([0, 1, 2, 3, 4])
    assert {k: v.tolist() for k, v in wanted.items()} == {"cam_a": [2, 3, 4, 5, 6]}
    reader.add(wanted, {k: torch.stack([frame_tensor(k, f) for f in v.tolist()]) for k, v in wanted.items()})
    for position in range(5):
        assert [tag(f)[1] for f in reader.window_frames(position)["cam_a"]] == needed["cam_a"][position].tolist()
    assert decode.calls == []
    # the next batch: the look-ahead (2 samples) reaches as far as its last sample
    assert {k: v.tolist() for k, v in reader.missing([5, 6]).items()} == {"cam_a": [7, 8]}
    assert reader.missing([]) == {}


def test_decoded_all_is_called_once_after_the_last_frame_the_samples_need_is_decoded():
    rows = episode_rows(LENGTH)
    decode, calls = FakeDecode(rows), []
    needed = windows(CHRONOLOGICAL, LENGTH, WINDOWS)
    reader = PieceReader(rows, np.asarray(CHRONOLOGICAL), needed, decode, 3, decoded_all=lambda: calls.append(1))
    for position in range(len(CHRONOLOGICAL)):
        reader.window_frames(position)
        # decoded in runs of 3 samples: the last run starts at sample 6
        assert calls == ([1] if position >= 6 else []), position
    assert reader.undecoded == 0 and len(decode.calls) == 3


def test_the_reader_keeps_its_rows_source_and_sample_order():
    reader, _, _ = make_reader(STRIDE_2, LENGTH, WINDOWS, decode_ahead=2)
    assert reader.rows.episode == EPISODE and reader.source == 2
    assert reader.sample_frames.tolist() == STRIDE_2
