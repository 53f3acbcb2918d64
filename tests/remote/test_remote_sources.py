"""Streaming from real servers on 127.0.0.1 (HTTP with Range, moto S3), with faults injected by a proxy."""

from __future__ import annotations

import warnings

import pytest
import torch

from robostream import LeRobotDataset, Mixture, StreamingLeRobotDataset, StreamOptions
from robostream.errors import TooLargeError
from robostream.storage.options import ReadOptions
from robostream.storage.retry import RemoteReadError, RetryPolicy

from .servers import FaultProxy, RangeHTTPServer, drop_mid_body, http_status, reset, stall

FAST_RETRY = RetryPolicy(max_attempts=6, base_delay_s=0.01, max_delay_s=0.05, timeout_s=1.0)
FAST = ReadOptions(retry=FAST_RETRY)
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def http_dataset(av1_root):
    with RangeHTTPServer(av1_root) as server:
        yield server


@pytest.fixture(scope="module")
def s3_dataset(s3_server, av1_root):
    s3_server.upload_dir("datasets", av1_root, prefix="av1/")
    return "s3://datasets/av1", s3_server.storage_options()


def _ids_and_samples(dataset):
    return [(int(s["index"]), s) for s in dataset]


def _assert_same(remote, local):
    remote, local = _ids_and_samples(remote), _ids_and_samples(local)
    assert [i for i, _ in remote] == [i for i, _ in local]  # same order for the same seed
    for (_, a), (_, b) in zip(remote, local):
        for key, value in b.items():
            assert torch.equal(a[key], value) if isinstance(value, torch.Tensor) else a[key] == value, key


def test_http_stream_equals_local(http_dataset, av1_root):
    remote = StreamingLeRobotDataset(root=http_dataset.url, seed=5, return_uint8=True, read_options=FAST)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=5, return_uint8=True))
    served = sum(s["bytes"] for s in http_dataset.stats().values())
    on_disk = sum(p.stat().st_size for p in av1_root.rglob("*") if p.is_file())
    assert served >= 0.5 * on_disk and remote.meta.storage.stats().bytes_read > 0


def test_s3_stream_and_map_style_equal_local(s3_dataset, av1_root):
    url, options = s3_dataset
    remote = StreamingLeRobotDataset(
        root=url, read_options=ReadOptions(storage_options=options, retry=FAST_RETRY), seed=8, return_uint8=True
    )
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=8, return_uint8=True))
    mapped = LeRobotDataset(
        root=url, read_options=ReadOptions(storage_options=options, retry=FAST_RETRY), return_uint8=True
    )
    local = LeRobotDataset(root=av1_root, return_uint8=True)
    for i in (0, 17, len(local) - 1):
        assert torch.equal(mapped[i]["observation.images.cam1"], local[i]["observation.images.cam1"])


@pytest.mark.parametrize(
    "fault",
    [http_status(503), http_status(429, retry_after=0), drop_mid_body(), reset(), stall(seconds=30)],
    ids=["503", "429", "drop", "reset", "stall"],
)
def test_http_faults_are_retried_and_the_epoch_is_exact(http_dataset, av1_root, make_fault_proxy, fault):
    # Faults hit requests 2, 6, 10, ... up to 30 (a stall costs one request timeout each).
    proxy: FaultProxy = make_fault_proxy(
        http_dataset.url, lambda n, method, path: fault if n % 4 == 2 and n <= 30 else None
    )
    remote = StreamingLeRobotDataset(root=proxy.url, seed=2, return_uint8=True, read_options=FAST)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=2, return_uint8=True))
    assert proxy.stats()["faults"] > 0


def test_faults_outlasting_the_bound_give_a_clear_error(http_dataset, av1_root, make_fault_proxy):
    proxy = make_fault_proxy(http_dataset.url, lambda n, method, path: http_status(503) if "videos/" in path else None)
    remote = StreamingLeRobotDataset(
        root=proxy.url,
        seed=2,
        return_uint8=True,
        read_options=ReadOptions(retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, timeout_s=2.0)),
    )
    with pytest.raises(
        RemoteReadError,
        match=r"videos/observation\.images\.cam\d/chunk-000/file-00\d\.mp4.*"
        r"(bytes \d+-\d+|size|exists).*3 attempts",
    ):
        next(iter(remote))


def test_a_server_without_range_support_is_refused_clearly(tmp_path):
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from robostream.storage.store import Storage

    class Quiet(SimpleHTTPRequestHandler):  # the stdlib handler ignores Range headers
        def log_message(self, *args):
            pass

    (tmp_path / "big.bin").write_bytes(bytes(range(256)) * (3 * 4096))  # 3 MiB: several ranged blocks
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        reader = Storage(f"http://127.0.0.1:{server.server_port}", ReadOptions(retry=FAST_RETRY)).open("big.bin")
        reader.seek(2 << 20)
        with pytest.raises(
            TooLargeError,
            match="announces 3145728 bytes .*, more than the 65536 bytes of the range "
            "2097152-2162687 asked for: the server ignored the byte range",
        ):
            reader.read(10)  # refused unread: the whole file is never buffered for a block
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("source", ["http", "s3"])
def test_remote_streaming_through_dataloader_worker_processes(source, http_dataset, s3_dataset, av1_root):
    """fsspec's async filesystems were used in the parent (metadata); forked workers must get working ones."""
    from torch.utils.data import DataLoader

    if source == "http":
        kwargs = {"root": http_dataset.url, "read_options": FAST}
    else:
        kwargs = {"root": s3_dataset[0], "read_options": ReadOptions(storage_options=s3_dataset[1], retry=FAST_RETRY)}
    dataset = StreamingLeRobotDataset(seed=1, return_uint8=True, **kwargs)
    ids = [i for batch in DataLoader(dataset, batch_size=8, num_workers=2) for i in batch["index"].tolist()]
    assert sorted(ids) == list(range(len(LeRobotDataset(root=av1_root))))


def test_disk_cache_serves_the_second_epoch_without_downloads(http_dataset, av1_root, tmp_path):
    kwargs = {
        "root": http_dataset.url,
        "seed": 4,
        "return_uint8": True,
        "read_options": ReadOptions(retry=FAST_RETRY, cache_dir=tmp_path / "cache", cache_limit="50mb"),
    }
    _assert_same(StreamingLeRobotDataset(**kwargs), StreamingLeRobotDataset(root=av1_root, seed=4, return_uint8=True))
    video_bytes = lambda: sum(s["bytes"] for p, s in http_dataset.stats().items() if "/videos/" in p)  # noqa: E731
    first = video_bytes()
    assert first > 0
    again = StreamingLeRobotDataset(**kwargs)
    assert len(list(again)) > 0
    assert video_bytes() == first  # every video came from the cache
    cached = [p for p in (tmp_path / "cache" / "objects").rglob("*.mp4")]
    assert len(cached) == len(list(av1_root.rglob("*.mp4")))
    with pytest.raises(ValueError, match="do not fit cache_limit=1000"):
        list(
            StreamingLeRobotDataset(
                **{
                    **kwargs,
                    "read_options": ReadOptions(retry=FAST_RETRY, cache_dir=tmp_path / "tiny", cache_limit=1000),
                }
            )
        )


@pytest.mark.parametrize("read_buffer", [64 << 10, "128mb"])
def test_remote_reads_stay_within_the_read_buffer(http_dataset, av1_root, read_buffer):
    """With a buffer several times smaller than the dataset, fetched blocks held never exceed it (plus the block
    being stored) and the epoch is still exact; with an adequate buffer the bytes fetched per epoch are close to
    the size of the video files (a tiny buffer re-fetches evicted blocks: the price of the bound)."""
    from torch.utils.data import DataLoader

    videos = sum(p.stat().st_size for p in av1_root.rglob("*.mp4"))
    dataset = StreamingLeRobotDataset(
        root=http_dataset.url,
        seed=6,
        return_uint8=True,
        read_options=ReadOptions(retry=FAST_RETRY, read_buffer=read_buffer),
    )
    ids = [i for b in DataLoader(dataset, batch_size=8, num_workers=2) for i in b["index"].tolist()]
    assert sorted(ids) == list(range(len(LeRobotDataset(root=av1_root))))
    counts = dataset.frame_counts()
    storage = dataset.meta.data_storage
    assert 0 < counts["block_bytes_peak"] <= storage.block_budget + storage.block_size
    if storage.block_budget > 4 * videos:
        # The workers read the videos and data files of their own pieces: each file about once per worker that
        # reads from it (the parent read only metadata).
        data = sum(p.stat().st_size for p in av1_root.glob("data/*/*.parquet"))
        assert counts["bytes_read"] <= 2 * (videos + data), (counts["bytes_read"], videos, data)


def test_a_read_buffer_too_small_for_the_live_pieces_is_said(http_dataset, av1_root):
    """1 MB (16 KiB blocks) for one process's live pieces x 2 cameras: less than 4 blocks each, the read-ahead runs
    out of room for the next samples' bytes; the pass says so (and stays exact), 128 MB says nothing."""
    expected = list(range(len(LeRobotDataset(root=av1_root))))
    small = StreamingLeRobotDataset(
        root=http_dataset.url, seed=6, return_uint8=True, read_options=ReadOptions(retry=FAST_RETRY, read_buffer="1mb")
    )
    with pytest.warns(RuntimeWarning, match=r"read_buffer=1 MB holds less than 4 blocks of 16 KiB for each of the "):
        assert sorted(int(sample["index"]) for sample in small) == expected
    adequate = StreamingLeRobotDataset(
        root=http_dataset.url,
        seed=6,
        return_uint8=True,
        read_options=ReadOptions(retry=FAST_RETRY, read_buffer="128mb"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert sorted(int(sample["index"]) for sample in adequate) == expected


def test_a_read_buffer_left_to_its_default_grows_to_the_live_pieces(http_dataset, av1_root, monkeypatch):
    """The same pass with the default buffer made 1 MB: it grows to 6 blocks per live camera piece, no warning."""
    monkeypatch.setattr("robostream.storage.options.DEFAULT_READ_BUFFER", 1_000_000)
    dataset = StreamingLeRobotDataset(root=http_dataset.url, seed=6, return_uint8=True, read_options=FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        indices = sorted(int(sample["index"]) for sample in dataset)
    assert indices == list(range(len(LeRobotDataset(root=av1_root))))
    storage = dataset.meta.data_storage
    assert storage.block_size == 16 << 10
    # at least 12 live pieces of 2 cameras (7 episodes cut into 12 streams): 6 x 16 KiB x 24 = 2.4 MB
    assert storage.blocks.budget_bytes >= 6 * storage.block_size * 24, storage.blocks.budget_bytes


def test_read_ahead_failures_are_counted_and_the_sample_gets_the_error(av1_root, tmp_path):
    """A video file of an upcoming piece is missing: the read-ahead counts its failure (no silent loss) and the
    sample that needs it gets a clear error naming the file, after every earlier sample came through."""
    from robostream.errors import MissingFileError
    from robostream.format.metadata import load_metadata
    from tests.helpers import copy_tree

    root = copy_tree(av1_root, tmp_path / "ds")
    meta = load_metadata(root)
    key, victim = next(
        (k, e) for k in meta.video_keys for e in (1, 2) if meta.video_file(e, k) != meta.video_file(0, k)
    )
    missing = meta.video_file(victim, key)
    (root / missing).unlink()
    with RangeHTTPServer(root) as server:
        dataset = StreamingLeRobotDataset(
            root=server.url,
            shuffle=False,
            streams=StreamOptions(canonical_streams=1),
            return_uint8=True,
            read_options=FAST,
        )
        seen = []
        with pytest.raises(MissingFileError, match=missing.replace(".", r"\.")):
            for sample in dataset:
                seen.append(int(sample["episode_index"]))
    assert 0 in seen and max(seen) < victim  # every sample before the broken piece was delivered
    assert dataset.frame_counts()["read_ahead_errors"] >= 1


def test_a_mixture_of_http_s3_and_local_sources_equals_the_local_mixture(http_dataset, s3_dataset, av1_root):
    """Each Source brings its own options (here an HTTP server, moto S3 and a local folder, with DataLoader
    workers): the mixture's batches equal those of the same mixture read locally."""
    from robostream import Source, StreamingDataLoader

    url, options = s3_dataset
    remote = [
        Source(root=http_dataset.url, episodes=[0, 1, 2], read_options=FAST),
        Source(
            root=url, episodes=[3, 4], repeat=2, read_options=ReadOptions(storage_options=options, retry=FAST_RETRY)
        ),
        Source(root=av1_root, episodes=[5, 6], choose=20),
    ]
    local = [
        Source(root=av1_root, episodes=[0, 1, 2]),
        Source(root=av1_root, episodes=[3, 4], repeat=2),
        Source(root=av1_root, episodes=[5, 6], choose=20),
    ]

    def batches(sources):
        dataset = StreamingLeRobotDataset(mixture=Mixture(sources=sources), seed=2, return_uint8=True)
        return list(StreamingDataLoader(dataset, batch_size=8, num_workers=2))

    got, want = batches(remote), batches(local)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in b:
            assert torch.equal(a[key], b[key]) if isinstance(b[key], torch.Tensor) else a[key] == b[key], key


@pytest.mark.parametrize("source", ["http", "s3"])
def test_slow_down_answers_are_retried_counted_and_halve_the_requests_in_flight(
    source, http_dataset, s3_dataset, s3_server, av1_root, make_fault_proxy
):
    """A store over its request rate answers 503 SlowDown (S3's XML error through s3fs; plain 503 over HTTP): each
    one is retried after a backoff and counted as a throttle, the process's read-ahead allows half as many requests
    in flight, and the epoch is the local one."""

    def slow_down(n, method, path):
        return http_status(503) if "videos/" in path and n % 5 == 3 and n <= 40 else None

    if source == "http":
        proxy = make_fault_proxy(http_dataset.url, slow_down)
        root, options = proxy.url, FAST
    else:
        proxy = make_fault_proxy(s3_server.endpoint_url, slow_down)
        root = s3_dataset[0]
        options = ReadOptions(storage_options=s3_server.storage_options(proxy.url), retry=FAST_RETRY)
    remote = StreamingLeRobotDataset(root=root, seed=3, return_uint8=True, read_options=options)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True))
    stats = remote.meta.data_storage.stats()  # the video files' storage
    faults = proxy.stats()["faults"]
    assert faults > 0 and stats.throttled == faults and stats.retries >= faults
    assert 1 <= stats.allowed_in_flight_low <= stats.max_in_flight // 2
