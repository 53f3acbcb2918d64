"""Remote map-style frames decoded from their own packets (video/packet_frames.py), fetched exactly
(storage/exact_ranges.py): the local samples, on AV1 (lerobot's default, GOP 2) and on H.264 with B-frames (a
decoder that holds frames back until drained), every packet fetched ahead, a few KB per random AV1 frame instead of
64 KiB reads; a range whose file changed fails with the file named, and is asked again by the next reader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robostream import LeRobotDataset, ReadOptions
from robostream.errors import FileChangedError
from robostream.format.metadata import load_metadata
from robostream.storage.retry import RetryPolicy
from robostream.video.packet_frames import PacketFrames
from robostream.video.packet_index import read_packet_index
from tests.helpers import copy_tree
from tests.remote.servers import RangeHTTPServer

FAST = ReadOptions(retry=RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0))


def _open_decoders(dataset: LeRobotDataset) -> list:
    state = dataset.reading.decoders._state.get()
    return [entry.decoder for entry in state.entries.values()]


def test_random_frames_come_from_their_packets_and_equal_the_local_ones(any_root):
    local = LeRobotDataset(root=any_root, return_uint8=True)
    positions = torch.randperm(len(local), generator=torch.Generator().manual_seed(3))[:24].tolist()
    with RangeHTTPServer(any_root, latency_s=0.02) as store:
        remote = LeRobotDataset(root=store.url, return_uint8=True, read_options=FAST)
        assert remote.cameras.packets
        got = remote.__getitems__(positions)
        exact = remote.meta.data_storage.exact_ranges
        decoders = _open_decoders(remote)
    for mine, theirs in zip(got, local.__getitems__(positions)):
        for key in local.meta.video_keys:
            assert torch.equal(mine[key], theirs[key]), key
    assert decoders and all(isinstance(d, PacketFrames) and d.served for d in decoders)
    frames = len(positions) * len(local.meta.video_keys)
    assert exact.taken_late == 0 and exact.taken_ahead >= 1  # every decoder call's packets were fetched ahead
    if "h264" not in str(any_root):  # AV1, GOP 2: a random frame's packets are a few KB (64 KiB+ read before)
        assert exact.bytes_asked / frames < 8 << 10, exact.bytes_asked / frames


def test_a_batchs_frames_sharing_a_keyframe_come_in_one_request_per_camera(av1_root):
    """A batch's packets are located and asked for together: two frames decoded from one keyframe (overlapping
    spans) cost one merged request per camera file, not one each."""
    local = LeRobotDataset(root=av1_root, return_uint8=True)
    with RangeHTTPServer(av1_root) as store:
        remote = LeRobotDataset(root=store.url, return_uint8=True, read_options=FAST)
        remote.__getitems__([int(remote.lengths[0]) - 1])  # the episode's files opened, their packet indexes read
        key = remote.meta.video_keys[0]
        episode = int(remote.meta.episodes.episode_index[0])
        start_s = remote.meta.episodes.video_span(episode, key).from_timestamp
        with open(av1_root / remote.meta.video_file(episode, key), "rb") as file:
            index = read_packet_index(file)
        shown = (start_s + np.arange(1, 8) / remote.meta.fps).astype(np.float64)
        first, _ = index.packets(shown, shown)
        i = int(np.flatnonzero(first[:-1] == first[1:])[0])  # frames i + 1 and i + 2 decode from one keyframe
        videos = lambda: sum(s["requests"] for p, s in store.stats().items() if "/videos/" in p)  # noqa: E731
        before = videos()
        got = remote.__getitems__([i + 1, i + 2])
        asked = videos() - before
    for mine, theirs in zip(got, local.__getitems__([i + 1, i + 2])):
        for camera in local.meta.video_keys:
            assert torch.equal(mine[camera], theirs[camera]), camera
    assert asked == len(local.meta.video_keys)


def test_a_range_of_a_changed_file_fails_naming_it_and_is_asked_again(av1_root, tmp_path):
    root = copy_tree(av1_root, tmp_path / "ds")
    with RangeHTTPServer(root) as store:
        meta = load_metadata(store.url, read_options=FAST)
        relative = meta.video_file(int(meta.episodes.episode_index[0]), meta.video_keys[0])
        reader = meta.open(relative, what="video file")
        size = (root / relative).stat().st_size
        (root / relative).write_bytes(np.random.default_rng(0).bytes(size))  # same size, other bytes: a new ETag
        reader.fetch_exact([(0, 100)])
        with pytest.raises(FileChangedError, match=relative):
            reader.take_exact(10, 50)
        path = f"/{relative}"
        asked = store.stats()[path]["requests"]
        with pytest.raises(FileChangedError, match=relative):
            reader.take_exact(10, 50)  # not the failed range kept: asked again
        assert store.stats()[path]["requests"] > asked


def test_exact_ranges_merge_keep_what_is_not_taken_and_drop_what_was(tmp_path):
    from robostream.storage.exact_ranges import ExactRanges
    from robostream.storage.store import Storage

    data = np.random.default_rng(1).bytes(10_000)
    (tmp_path / "blob.bin").write_bytes(data)
    with RangeHTTPServer(tmp_path) as store:
        source = Storage(store.url, FAST).open("blob.bin")
        ranges = ExactRanges(budget_bytes=1_000, threads=4)

        def fetches() -> int:
            return store.stats()["/blob.bin"]["requests"] - 1  # its HEAD at the open

        ranges.fetch(source, [(0, 300), (300, 600), (100, 200), (5_000, 5_400)])  # the first three: one request
        assert ranges.take(source, 0, 300) == data[:300]  # part of a merged range: it stays for the rest
        assert ranges.take(source, 300, 600) == data[300:600] and ranges.take(source, 5_000, 5_400) == data[5_000:5_400]
        assert fetches() == 2 and ranges.taken_ahead == 3 and ranges.taken_late == 0
        ranges.fetch(source, [(8_000, 8_900)])  # past the budget: the ranges taken go, oldest first; this one stays
        assert ranges.take(source, 8_000, 8_500) == data[8_000:8_500] and fetches() == 3
        assert ranges.take(source, 0, 10) == data[:10] and fetches() == 4  # dropped: fetched again
        ranges.fetch(source, [(6_000, 6_900)])  # not taken yet, with 8,000-8,900: kept up to twice the budget
        ranges.fetch(source, [(2_000, 2_300)])  # past twice it: the newest not taken goes (its request cancelled)
        ahead, late = ranges.taken_ahead, ranges.taken_late
        assert ranges.take(source, 8_500, 8_900) == data[8_500:8_900]
        assert ranges.take(source, 6_000, 6_900) == data[6_000:6_900]
        assert (ranges.taken_ahead, ranges.taken_late) == (ahead + 2, late)
        assert ranges.take(source, 2_000, 2_300) == data[2_000:2_300] and ranges.taken_late == late + 1


def test_touching_spans_merge_into_ranges_within_the_budget(tmp_path):
    """A batch of consecutive frames at GOP 2 asks touching spans: merged into ranges of at most the budget, not one
    range the length of them all (every take would wait for its whole transfer; past twice the budget it would be
    dropped before any take)."""
    from robostream.storage.exact_ranges import ExactRanges
    from robostream.storage.store import Storage

    data = np.random.default_rng(2).bytes(400_000)
    (tmp_path / "blob.bin").write_bytes(data)
    with RangeHTTPServer(tmp_path) as store:
        source = Storage(store.url, FAST).open("blob.bin")
        ranges = ExactRanges(budget_bytes=100_000, threads=4)
        spans = [(i * 10_000, (i + 1) * 10_000) for i in range(16)]  # 160 KB touching: one range unbounded
        ranges.fetch(source, spans)
        assert [ranges.take(source, start, end) for start, end in spans] == [data[s:e] for s, e in spans]
        assert ranges.taken_late == 0 and ranges.taken_ahead == len(spans)
        assert store.stats()["/blob.bin"]["requests"] - 1 == 2  # its HEAD at the open, then two ranges of 100 KB


@pytest.mark.parametrize("kind", ["h264_bframes", "hevc_g10"])
def test_each_frame_alone_from_its_packets_is_the_straight_decodes(kind, tmp_path):
    """H.264 with B-frames (frames held back until drained) is served from packets, frame by frame in random order
    and in sets; HEVC open GOP (frames shown before their keyframe) is left to torchcodec. Either way each frame is
    the one a straight decode from the start gives, bit for bit."""
    from robostream.storage.store import Storage
    from robostream.video.decoder import TorchCodecVideoDecoder
    from tests.video.encoded import FPS, encode

    encode(tmp_path / "video.mp4", kind, count=30)
    straight, _ = TorchCodecVideoDecoder(str(tmp_path / "video.mp4")).get_frames_by_index(list(range(30)))
    with RangeHTTPServer(tmp_path) as store:
        storage = Storage(store.url, FAST)
        torchcodec = TorchCodecVideoDecoder(storage.open("video.mp4"))
        assert torchcodec.packet_index is not None
        decoder = PacketFrames(torchcodec, packets=storage.open("video.mp4"), index=torchcodec.packet_index)
        assert decoder.served == (kind != "hevc_g10") == torchcodec.packet_index.evenly_shown
        order = np.random.default_rng(4).permutation(30).tolist()
        for i in order:
            frames, pts = decoder.get_frames_by_index([i])
            assert torch.equal(frames[0], straight[i]) and pts[0] == pytest.approx(i / FPS, abs=1e-9), i
        for picks in ([3, 4, 5, 17], [0, 29], list(range(30))):
            frames, _ = decoder.get_frames_by_index(picks)
            assert torch.equal(frames, straight[picks]), picks


@pytest.mark.parametrize("colorspace", [1, 6])  # BT.709, SMPTE 170M (BT.601)
def test_a_colour_description_in_the_container_only_is_used(tmp_path, colorspace):
    """A colour description in the mp4's colr box and not in the H.264 stream: the packets' decoder gets it from the
    container, as torchcodec's demuxer does (else BT.709 would convert as BT.601: up to 24 levels off, no error);
    BT.709, which PyAV 15 converts otherwise than torchcodec, is left to torchcodec."""
    import av

    from robostream.storage.store import Storage
    from robostream.video.decoder import TorchCodecVideoDecoder

    path = tmp_path / "colr.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=20)
        stream.width, stream.height, stream.pix_fmt = 128, 64, "yuv420p"
        rng = np.random.default_rng(0)
        packets = []
        for _ in range(6):
            pixels = rng.integers(0, 256, (64, 128, 3), dtype=np.uint8)
            packets += stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuv420p"))
        packets += stream.encode()
        codec = stream.codec_context
        codec.colorspace = codec.color_primaries = codec.color_trc = colorspace  # to the container only
        for packet in packets:
            container.mux(packet)
    straight, _ = TorchCodecVideoDecoder(str(path)).get_frames_by_index(list(range(6)))
    with RangeHTTPServer(tmp_path) as store:
        storage = Storage(store.url, FAST)
        torchcodec = TorchCodecVideoDecoder(storage.open("colr.mp4"))
        assert torchcodec.packet_index is not None
        decoder = PacketFrames(torchcodec, packets=storage.open("colr.mp4"), index=torchcodec.packet_index)
        assert decoder.served == (colorspace != 1)
        frames, _ = decoder.get_frames_by_index([4, 1, 1])
    assert torch.equal(frames, straight[[4, 1, 1]])  # a frame asked twice comes twice
