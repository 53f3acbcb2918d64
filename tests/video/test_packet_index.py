"""The packet index (video/packet_index.py): the byte spans it plans hold every byte the decoder reads.

A remote reader fetches `byte_spans` ahead and nothing else; a decoder reading outside them would pay a round trip
per miss. Here a recording file object counts the decoder's reads for frames across a real file (AV1 with GOP 2
and H.264 with B-frames and 30-frame GOPs, large enough for many 64 KiB chunks): every read must lie in the
planned span, which must stay a small part of the file.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from robostream.synth import SynthConfig, generate
from robostream.video.packet_index import (load_packet_index, moov_span, parse_packet_index, read_packet_index,
                                          save_packet_index)


class RecordingFile(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = io.BytesIO(data)
        self.reads: list[tuple[int, int]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._data.seek(offset, whence)

    def tell(self) -> int:
        return self._data.tell()

    def readinto(self, buffer) -> int:
        start = self._data.tell()
        count = self._data.readinto(buffer)
        self.reads.append((start, start + count))
        return count


@pytest.fixture(scope="module", params=["av1", "h264"])
def video(request, tmp_path_factory) -> bytes:
    gop = 2 if request.param == "av1" else 30
    root = generate(tmp_path_factory.mktemp(request.param) / "ds",
                    SynthConfig(episodes=1, cameras=1, height=128, width=128, episode_length=300, codec=request.param,
                                gop=gop, crf=4, seed=7))
    (path,) = sorted(Path(root, "videos").rglob("*.mp4"))
    return path.read_bytes()


def test_the_decoder_reads_only_inside_the_planned_span(video):
    from torchcodec.decoders import VideoDecoder

    index = read_packet_index(io.BytesIO(video))
    assert index is not None and len(index.pos) > 200
    assert len(video) > 4 * 64 * 1024  # many chunks: a span is a real choice
    spans = []
    for frame in range(0, len(index.pos), 13):
        file = RecordingFile(video)
        decoder = VideoDecoder(file, seek_mode="approximate")
        file.reads.clear()  # what opening read (the moov) is fetched separately
        shown = float(decoder.get_frames_at(indices=[frame]).pts_seconds[0])
        (start,), (end,) = index.byte_spans(np.array([shown]), np.array([shown]))
        outside = [(a, b) for a, b in file.reads if b > a and (a < start or b > end)]
        assert not outside, f"frame {frame}: span [{start}, {end}), reads outside it {outside[:4]}"
        spans.append(end - start)
    assert np.median(spans) < len(video) / 4  # a frame's span, not the file


def test_the_index_is_the_one_ffmpeg_builds(video):
    import av

    with av.open(io.BytesIO(video)) as container:
        stream = container.streams.video[0]
        if not hasattr(stream, "index_entries"):
            pytest.skip(f"PyAV {av.__version__} does not expose FFmpeg's index (18.1+) to compare with")
        rows = np.array([(e.pos, e.size, e.timestamp, e.is_keyframe) for e in stream.index_entries], dtype=np.int64)
        time_base = float(stream.time_base)
    file = io.BytesIO(video)
    file.seek(11)
    index = read_packet_index(file)
    assert file.tell() == 11
    assert np.array_equal(index.pos, rows[:, 0])
    assert np.array_equal(index.reach, np.maximum.accumulate(rows[:, 0] + rows[:, 1]))
    assert np.allclose(index.time_s, rows[:, 2] * time_base, rtol=0, atol=1e-9)  # B-frames: from below zero
    assert np.array_equal(index.keyframes, np.flatnonzero(rows[:, 3]))


def test_a_file_without_a_readable_sample_table_has_no_index(video):
    start, end = moov_span(io.BytesIO(video))
    moov = video[start:end]
    assert parse_packet_index(moov) is not None
    assert parse_packet_index(moov[: len(moov) // 2]) is None  # truncated
    assert parse_packet_index(moov.replace(b"stsz", b"xxxx")) is None  # no sizes
    assert parse_packet_index(moov.replace(b"vide", b"soun")) is None  # no video track
    assert read_packet_index(io.BytesIO(b"not an mp4 at all" * 10)) is None


def test_moov_span_is_the_index_box(video):
    start, end = moov_span(io.BytesIO(video))
    assert video[start + 4: start + 8] == b"moov"
    assert int.from_bytes(video[start: start + 4], "big") == end - start
    assert moov_span(io.BytesIO(b"not an mp4 at all" * 10)) is None
    file = io.BytesIO(video)
    file.seek(5)
    moov_span(file)
    assert file.tell() == 5  # the reader is left where it was (PyAV opens from there)


def test_an_index_saved_in_a_derived_folder_loads_equal(video, tmp_path):
    index = read_packet_index(io.BytesIO(video))
    save_packet_index(index, tmp_path)
    loaded = load_packet_index(tmp_path)
    assert loaded.frame_s == index.frame_s and loaded.delay_s == index.delay_s
    for name in ("pos", "reach", "time_s", "keyframes"):
        assert np.array_equal(getattr(loaded, name), getattr(index, name))
    times = np.linspace(0, index.time_s[-1], 17)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.byte_spans(times, times), index.byte_spans(times, times)))
    save_packet_index(None, tmp_path / ".." / tmp_path.name)  # a file without an index: remembered as such
    assert load_packet_index(tmp_path) is None
