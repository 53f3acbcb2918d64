"""The packet index (video/packet_index.py): the byte spans it plans hold every byte the decoder reads.

A remote reader fetches `byte_spans` ahead and nothing else; a decoder reading outside them would pay a round trip
per miss. Here a recording file object counts the decoder's reads for frames across a real file (AV1 with GOP 2
and H.264 with B-frames and 30-frame GOPs, large enough for many 64 KiB chunks): every read must lie in the
planned span, which must stay a small part of the file.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from robostream.synth import SynthConfig, generate
from robostream.video.decoder import BACKENDS, open_video_decoder
from robostream.video.packet_index import (
    AVIO_BYTES,
    load_packet_index,
    moov_span,
    parse_packet_index,
    read_packet_index,
    save_packet_index,
)
from tests.video.encoded import FPS, KINDS, encode

OPEN_GOP_FRAMES = 48


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
    root = generate(
        tmp_path_factory.mktemp(request.param) / "ds",
        SynthConfig(
            episodes=1,
            cameras=1,
            height=128,
            width=128,
            episode_length=300,
            codec=request.param,
            gop=gop,
            crf=4,
            seed=7,
        ),
    )
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
        time_base = stream.time_base
    file = io.BytesIO(video)
    file.seek(11)
    index = read_packet_index(file)
    assert file.tell() == 11
    assert np.array_equal(index.pos, rows[:, 0])
    assert np.array_equal(index.reach, np.maximum.accumulate(rows[:, 0] + rows[:, 1]))
    assert np.array_equal(index.dts, rows[:, 2]) and index.timescale == 1 / time_base  # B-frames: from below zero
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
    assert video[start + 4 : start + 8] == b"moov"
    assert int.from_bytes(video[start : start + 4], "big") == end - start
    assert moov_span(io.BytesIO(b"not an mp4 at all" * 10)) is None
    file = io.BytesIO(video)
    file.seek(5)
    moov_span(file)
    assert file.tell() == 5  # the reader is left where it was (PyAV opens from there)


def test_an_index_saved_in_a_derived_folder_loads_equal(video, tmp_path):
    index = read_packet_index(io.BytesIO(video))
    save_packet_index(index, tmp_path)
    loaded = load_packet_index(tmp_path)
    assert loaded.timescale == index.timescale and isinstance(loaded.timescale, int)
    assert loaded.frame_s == index.frame_s and loaded.has_leading_frames == index.has_leading_frames
    for name in ("pos", "reach", "dts", "pts", "duration", "keyframes"):
        assert np.array_equal(getattr(loaded, name), getattr(index, name))
    times = np.linspace(0, index.pts.max() / index.timescale, 17)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.byte_spans(times, times), index.byte_spans(times, times)))
    save_packet_index(None, tmp_path / ".." / tmp_path.name)  # a file without an index: remembered as such
    assert load_packet_index(tmp_path) is None


class BlankingFile(RecordingFile):
    """A RecordingFile whose bytes outside [start, end) read as zeros once `keep` is called: what a decoder gets
    from the bytes a remote reader fetched ahead alone (the rest would be fetched on demand)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self._kept: tuple[int, int] | None = None

    def keep(self, start: int, end: int) -> None:
        self._kept = (start, end)
        self.reads.clear()

    def readinto(self, buffer) -> int:
        start = self._data.tell()
        count = super().readinto(buffer)
        if self._kept is not None:
            view = memoryview(buffer).cast("B")
            for a, b in ((start, min(start + count, self._kept[0])), (max(start, self._kept[1]), start + count)):
                if b > a:  # the part before the kept span, and the part after it
                    view[a - start : b - start] = bytes(b - a)
        return count


@pytest.fixture(scope="module", params=sorted(KINDS.keys() - {"depth_intra", "hevc_g2"}))
def encoded(request, tmp_path_factory) -> tuple[str, bytes]:
    path = tmp_path_factory.mktemp(request.param) / "video.mp4"
    encode(path, request.param, count=30, size=64)
    return request.param, path.read_bytes()


def test_presentation_times_from_ctts_are_the_packets_ffmpeg_reads(encoded):
    import av

    kind, data = encoded
    index = read_packet_index(io.BytesIO(data))
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        packets = np.array(
            [(p.pts, p.dts, p.duration, p.pos, p.is_keyframe) for p in container.demux(stream) if p.size],
            dtype=np.int64,
        )
        assert index.timescale == 1 / stream.time_base
    assert np.array_equal(index.pts, packets[:, 0]), kind
    assert np.array_equal(index.dts, packets[:, 1]), kind
    assert np.array_equal(index.duration, packets[:, 2]) and np.array_equal(index.pos, packets[:, 3])
    assert np.array_equal(index.keyframes, np.flatnonzero(packets[:, 4]))
    assert np.any(index.pts != index.dts)  # reordered: the offsets matter
    start, _ = moov_span(io.BytesIO(data))
    ctts = data.index(b"ctts", start)
    # FFmpeg writes version 1 (signed offsets, some negative) for negative_cts_offsets, else version 0.
    assert data[ctts + 4] == (1 if kind == "h264_negative_cts" else 0)
    assert index.frame_s == pytest.approx(1 / FPS)
    # Frames decoded after a keyframe but shown before it: HEVC's open GOP, never H.264's closed one.
    assert index.has_leading_frames == (kind in ("depth", "hevc_g10"))


@pytest.fixture(scope="module", params=["depth", "hevc_g10"])
def open_gop(request, tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp(request.param) / "video.mp4"
    encode(path, request.param, count=OPEN_GOP_FRAMES, size=128, noise=True)
    return path.read_bytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_planned_bytes_alone_decode_any_frame_of_an_open_gop(open_gop, backend):
    index = read_packet_index(io.BytesIO(open_gop))
    assert index.has_leading_frames and len(open_gop) > 4 * AVIO_BYTES  # many chunks: a span is a real choice
    frames = list(range(OPEN_GOP_FRAMES))
    reference, _ = open_video_decoder(io.BytesIO(open_gop), backend).get_frames_by_index(frames)
    for frame in random.Random(5).sample(frames, 12):
        file = BlankingFile(open_gop)
        decoder = open_video_decoder(file, backend, name="camera.mp4")
        shown = np.array([frame / FPS])
        (start,), (end,) = index.byte_spans(shown, shown)
        # From the last keyframe shown at or before the frame, whatever keyframes are decoded between them.
        keys = index.keyframes[index.pts[index.keyframes] <= round(frame / FPS * index.timescale)]
        keyframe = keys[np.argmax(index.pts[keys])]
        assert start == index.pos[keyframe] // AVIO_BYTES * AVIO_BYTES
        file.keep(start, end)  # what opening read (the moov) is fetched separately
        decoded, pts = decoder.get_frames_by_index([frame])
        outside = [(a, b) for a, b in file.reads if b > a and (a < start or b > end)]
        assert not outside, f"frame {frame}: span [{start}, {end}), reads outside it {outside[:4]}"
        assert torch.equal(decoded[0], reference[frame]) and pts[0] == pytest.approx(frame / FPS, abs=1e-9)
