"""Storage.probe asks an HTTP root's files at once (one round trip for all), each request retried on its own, and
probe_meta finds a plain-HTTP dataset's episodes files in rollover order with it: exactly the files up to the first
missing one, whatever chunks_size is.

Real servers on 127.0.0.1 (the slow store with a first-byte latency, a fault-injecting proxy in front of it).
"""

from __future__ import annotations

import json

import pytest

from robostream.format.metadata import probe_meta
from robostream.storage.integrity import FileVersion
from robostream.storage.options import ReadOptions
from robostream.storage.retry import RemoteReadError, RetryPolicy
from robostream.storage.store import Storage

from .servers import RangeHTTPServer, http_status

FAST = ReadOptions(retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=10.0))


def _files(root, names):
    for name, data in names.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_probe_asks_every_file_at_once_and_reports_the_missing(tmp_path):
    _files(tmp_path, {"a.json": b"{}", "b.bin": b"x" * 10, "c.bin": b"y" * 20})
    with RangeHTTPServer(tmp_path, latency_s=0.2) as server:
        storage = Storage(server.url, FAST)
        probed = storage.probe(whole=["a.json", "gone.json"], heads=["b.bin", "c.bin", "gone.bin"])
        assert server.load.most == 5, f"{server.load.most} requests at most in flight: not asked at once"
    assert probed.whole == {"a.json": b"{}"}
    assert {k: v.size for k, v in probed.versions.items()} == {"b.bin": 10, "c.bin": 20}
    assert sorted(probed.missing) == ["gone.bin", "gone.json"]
    assert "gone.json: not found" in str(probed.missing["gone.json"])
    # The versions seen are the ones readers of these files open (as after `stat`): no second HEAD.
    server_stats = server.stats()
    assert server_stats["/b.bin"]["requests"] == 1


def test_probe_retries_each_request_on_its_own_and_raises_what_outlasts_the_bound(tmp_path, make_fault_proxy):
    _files(tmp_path, {"a.json": b"{}", "b.bin": b"x" * 10})
    with RangeHTTPServer(tmp_path) as server:
        flaky = make_fault_proxy(server.url, lambda n, method, path: http_status(503) if n <= 2 else None)
        probed = Storage(flaky.url, FAST).probe(whole=["a.json"], heads=["b.bin"])
        assert probed.whole == {"a.json": b"{}"} and probed.versions["b.bin"].size == 10
        assert flaky.stats()["faults"] == 2
        broken = make_fault_proxy(server.url, lambda n, method, path: http_status(503) if "b.bin" in path else None)
        with pytest.raises(RemoteReadError, match=r"b\.bin \(size\): still failing after 3 attempts"):
            Storage(broken.url, FAST).probe(whole=["a.json"], heads=["b.bin"])


def test_probe_is_for_http_roots(tmp_path):
    with pytest.raises(ValueError, match="Storage.probe is for http"):
        Storage(tmp_path).probe(whole=["a"], heads=[])


@pytest.mark.parametrize(
    ("chunks_size", "present", "beyond"),
    [
        (1000, ["chunk-000/file-000"], ["chunk-000/file-002"]),
        (2, ["chunk-000/file-000", "chunk-000/file-001", "chunk-001/file-000", "chunk-001/file-001"], []),
        (1, ["chunk-000/file-000", "chunk-001/file-000", "chunk-002/file-000"], ["chunk-000/file-001"]),
        (1000, [f"chunk-000/file-{i:03d}" for i in range(11)], ["chunk-000/file-012"]),
    ],
    ids=["one_file", "rollover", "one_per_chunk", "eleven"],
)
def test_probe_meta_finds_the_episodes_files_up_to_the_first_missing(tmp_path, chunks_size, present, beyond):
    """`beyond`: files that are not next in rollover order (after a gap, or outside chunks_size): never counted."""
    info = json.dumps({"chunks_size": chunks_size}).encode()
    episodes = {f"meta/episodes/{name}.parquet": name.encode() for name in [*present, *beyond]}
    _files(tmp_path, {"meta/info.json": info, "meta/tasks.parquet": b"tasks", **episodes})
    with RangeHTTPServer(tmp_path) as server:
        meta = probe_meta(Storage(server.url, FAST))
        requests = sum(s["requests"] for s in server.stats().values())
    assert meta.fetched == {"meta/info.json": info, "meta/tasks.parquet": b"tasks"}
    assert meta.versions is not None
    expected = {f"meta/episodes/{name}.parquet": len(name) for name in present}
    assert {k: v.size for k, v in meta.versions.items()} == {
        "meta/info.json": len(info),
        "meta/tasks.parquet": 5,
        **expected,
    }
    assert all(isinstance(v, FileVersion) and v.etag for k, v in meta.versions.items() if k in expected)
    # The small files, the first two episodes files, then as many at once as were found: at most 2x the files.
    assert requests <= 3 + 2 * (len(present) + 1), requests
