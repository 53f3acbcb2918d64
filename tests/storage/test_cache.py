import multiprocessing
import os
from pathlib import Path

import pytest

from robostream.storage.cache import DiskCache, parse_size


def _writer(data: bytes):
    def download(out) -> None:
        out.write(data)

    return download


def test_sizes_parse():
    assert parse_size("20gb") == 20 * 10**9 and parse_size("512 MiB") == 512 * 2**20 and parse_size(7) == 7
    with pytest.raises(ValueError, match="cache_limit='lots'"):
        parse_size("lots")


def test_hits_lru_eviction_and_limit(tmp_path):
    cache = DiskCache(tmp_path / "c", limit=250)
    downloads = []

    def fetch(key, size):
        def download(out):
            downloads.append(key)
            out.write(b"x" * size)

        path = cache.fetch(key, size, download)
        del path  # unpin

    for key in ("a", "b", "a"):
        fetch(key, 100)
    assert downloads == ["a", "b"]  # the second "a" is a hit
    fetch("c", 100)  # 300 > 250: the least recently used ("b") goes
    assert downloads == ["a", "b", "c"] and cache.usage() == 200
    fetch("a", 100)
    assert downloads == ["a", "b", "c"]
    fetch("b", 100)
    assert downloads[-1] == "b"


def test_a_file_larger_than_the_limit_is_an_immediate_clear_error(tmp_path):
    cache = DiskCache(tmp_path / "c", limit="1kb")
    with pytest.raises(ValueError, match=r"http://x/big.mp4: 5000 bytes do not fit cache_limit=1000"):
        cache.fetch("http://x/big.mp4", 5000, _writer(b"0" * 5000))


def test_a_short_download_is_rejected_and_leaves_nothing(tmp_path):
    cache = DiskCache(tmp_path / "c", limit=1000)
    with pytest.raises(OSError, match="downloaded 3 bytes, expected 10"):
        cache.fetch("k", 10, _writer(b"abc"))
    assert cache.usage() == 0 and not [p for p in (tmp_path / "c").rglob(".partial-*")]


def _pin_and_wait(directory, ready, release):
    cache = DiskCache(directory, limit=250)
    path = cache.fetch("pinned", 100, _writer(b"p" * 100))
    ready.set()
    release.wait(30)
    assert Path(path).read_bytes() == b"p" * 100
    del path


def test_a_file_pinned_by_another_process_is_never_evicted(tmp_path):
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    child = context.Process(target=_pin_and_wait, args=(tmp_path / "c", ready, release))
    child.start()
    try:
        assert ready.wait(60)
        cache = DiskCache(tmp_path / "c", limit=250)
        for key in ("x", "y", "z"):  # each needs room; only unpinned files may go
            path = cache.fetch(key, 100, _writer(key.encode() * 100))
            del path
        pinned = cache._object("pinned")
        assert pinned.is_file()
    finally:
        release.set()
        child.join(60)
    assert child.exitcode == 0


def _fetch_same(directory, barrier, results):
    cache = DiskCache(directory, limit=10**6)
    barrier.wait(30)
    path = cache.fetch("same", 50_000, _writer(bytes(range(250)) * 200))
    results.put(Path(path).read_bytes() == bytes(range(250)) * 200)


def test_concurrent_writers_of_one_file(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    children = [context.Process(target=_fetch_same, args=(tmp_path / "c", barrier, results)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [results.get(timeout=10) for _ in children] == [True] * 3
    files = [p for p in (tmp_path / "c" / "objects").rglob("*") if p.is_file() and not p.name.endswith(".pin")]
    assert len(files) == 1 and os.path.getsize(files[0]) == 50_000


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_a_decoder_keeps_its_cached_file_pinned(tmp_path, av1_root, backend):
    """The cache's pin travels with the decoder: while a decoder reads a cached file, eviction skips it, however
    the path object that came from the cache was dropped; once the decoder is gone the file can go."""
    import gc

    from robostream.video.decoder import open_video_decoder

    data = sorted(av1_root.rglob("*.mp4"))[0].read_bytes()
    cache = DiskCache(tmp_path / "c", limit=len(data) + 10)  # room for one file
    path = cache.fetch("http://x/a.mp4", len(data), _writer(data))
    file_a = Path(str(path))
    decoder = open_video_decoder(path, backend, name="a.mp4")
    del path
    gc.collect()
    del_b = cache.fetch("http://x/b.mp4", len(data), _writer(data))  # wants a's room: a is in use
    del del_b
    assert file_a.is_file(), "the cache evicted a file a decoder was reading"
    assert decoder.get_frames_by_index([0])[0].shape[0] == 1
    del decoder
    gc.collect()
    cache.fetch("http://x/c.mp4", len(data), _writer(data))
    assert not file_a.is_file(), "a file nobody reads was kept"


def test_a_shared_cache_folder_keeps_each_users_entries_in_a_folder_of_their_own(tmp_path):
    """A folder every user may write to (mode 1777) held everyone's entries side by side: any user could plant
    one, and entries made 0700 by one user were a bare PermissionError for the next."""
    from robostream.storage.derived import DerivedCache

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = shared / str(os.geteuid())
    assert DiskCache(shared, limit=1000).directory == mine and DerivedCache(shared).directory == mine
    assert mine.stat().st_mode & 0o777 == 0o700
    private = tmp_path / "private"  # this user's own folder, closed to others: used as it is
    assert DiskCache(private, limit=1000).directory == private


def test_a_file_added_to_a_derived_entry_fails_its_record_and_the_entry_is_rebuilt(tmp_path):
    from robostream.storage.derived import DerivedCache

    cache = DerivedCache(tmp_path / "derived")

    def build(folder: Path) -> None:
        (folder / "values.bin").write_bytes(b"\x01" * 64)

    def load(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))

    assert cache.open("source", build, load) == ["values.bin"]
    entry = next(p for p in cache.directory.iterdir() if not p.name.startswith("."))
    (entry / "other.arrow").write_bytes(b"planted")
    with pytest.warns(RuntimeWarning, match=r"derived-data cache entry is damaged .*other\.arrow"):
        assert DerivedCache(tmp_path / "derived").open("source", build, load) == ["values.bin"]
