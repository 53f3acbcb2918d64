import os
import threading

import pytest

from robostream.format.metadata import load_metadata
from robostream.video.cache import VideoDecoderCache


@pytest.fixture()
def video_files(av1_root):
    meta = load_metadata(av1_root)
    files = sorted(
        {str(meta.local(meta.video_file(int(e), k), "t")) for k in meta.video_keys for e in meta.episodes.episode_index}
    )
    assert len(files) >= 3
    return files


def test_stats_are_exact_on_a_known_access_pattern(video_files):
    a, b, c = video_files[:3]
    cache = VideoDecoderCache(max_size=2)
    pattern = [a, b, a, c, a, b, b, c]
    # LRU of 2: a miss, b miss, a hit, c miss (evict b), a hit, b miss (evict c), b hit, c miss (evict a)
    for path in pattern:
        with cache.use(path) as decoder:
            assert decoder.path == path
    assert cache.stats() == {
        "hits": 3,
        "misses": 5,
        "evictions": 3,
        "hit_rate": 3 / 8,
        "size": 2,
        "decoder_calls": 0,
        "seeks": 0,
    }
    cache.clear()
    assert cache.stats() == {
        "hits": 0,
        "misses": 0,
        "evictions": 0,
        "hit_rate": 0.0,
        "size": 0,
        "decoder_calls": 0,
        "seeks": 0,
    }


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_decoder_calls_and_seeks_are_counted_across_evictions(video_files, backend):
    a, b = video_files[:2]
    cache = VideoDecoderCache(max_size=1)
    requests = [(a, [0, 1, 2]), (a, [3, 4]), (a, [9]), (a, [2, 3, 7]), (b, [0]), (a, [0])]
    for path, frames in requests:
        with cache.use(path, backend) as decoder:
            decoder.get_frames_by_index(frames)
    stats = cache.stats()
    assert stats["decoder_calls"] == len(requests) and stats["evictions"] == 2
    if backend == "torchcodec":
        # Jumps: the first request, 4 -> 9, 9 -> 2 and 3 -> 7, b's first, a reopened.
        assert stats["seeks"] == 6
    else:
        # PyAV re-seeks only backwards or past its look-ahead: the first request, 9 -> 2, b's first, a reopened.
        assert stats["seeks"] == 4


def test_a_closed_decoder_is_gone_its_counts_kept_and_only_its_own_entry_closed(video_files):
    a, b = video_files[:2]
    cache = VideoDecoderCache(max_size=4)
    for path in (a, b):
        with cache.use(path) as decoder:
            decoder.get_frames_by_index([0, 1])
    with cache.use(a, backend="pyav") as plain:
        pass
    cache.close(a)  # the torchcodec entry of a: b and a's PyAV entry stay
    cache.close(a, device="cuda")  # never opened: nothing
    stats = cache.stats()
    assert stats["size"] == 2 and stats["evictions"] == 0 and stats["decoder_calls"] == 2, stats
    with cache.use(a, backend="pyav") as again:
        assert again is plain
    with cache.use(a) as reopened:
        assert reopened.calls == 0  # a new decoder
    assert cache.stats()["misses"] == 4
    # A PyAV container is closed at once, its file with it (not left to the collector: `plain` is still referenced)
    open_files = len(os.listdir("/proc/self/fd"))
    cache.close(a, backend="pyav")
    assert cache.stats()["size"] == 2 and len(os.listdir("/proc/self/fd")) == open_files - 1


def test_same_decoder_is_returned_and_backends_are_separate_entries(video_files):
    cache = VideoDecoderCache(max_size=4)
    with cache.use(video_files[0]) as first:
        pass
    with cache.use(video_files[0]) as again:
        assert again is first
    with cache.use(video_files[0], backend="pyav") as other:
        assert other is not first
    assert cache.stats()["misses"] == 2 and cache.stats()["hits"] == 1


def test_concurrent_threads_count_every_lookup(video_files):
    cache = VideoDecoderCache(max_size=len(video_files))
    for path in video_files:  # warm: every later lookup is a hit
        with cache.use(path):
            pass

    def work():
        for _ in range(50):
            for path in video_files:
                with cache.use(path):
                    pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = cache.stats()
    assert stats["misses"] == len(video_files) and stats["hits"] == 4 * 50 * len(video_files)
    assert stats["evictions"] == 0


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="max_size"):
        VideoDecoderCache(max_size=0)
