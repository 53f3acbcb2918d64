"""The slow store (RangeHTTPServer with latency, bandwidth and a cap on requests in flight; issue 23's store to
measure against): each knob holds, and the readers return the same samples through it.

Only lower bounds on time are asserted (a server cannot answer sooner than it waits; a loaded machine only makes
it later); speed itself is measured in benchmarks, not here.
"""

from __future__ import annotations

import threading
import time

import requests

from robostream import StreamingLeRobotDataset

from .servers import DATA_FILES, RangeHTTPServer


def test_first_byte_latency_and_bandwidth_hold(remote_data_dir):
    with RangeHTTPServer(remote_data_dir, latency_s=0.2) as store:
        started = time.monotonic()
        assert requests.get(store.url_for("small.txt"), timeout=30).status_code == 200
        assert time.monotonic() - started >= 0.2
    size = DATA_FILES["blob.bin"]  # 200 kB at 1 MB/s: at least 0.2 s less the first 64 KiB chunk's share
    with RangeHTTPServer(remote_data_dir, bandwidth=1e6) as store:
        started = time.monotonic()
        assert len(requests.get(store.url_for("blob.bin"), timeout=30).content) == size
        assert time.monotonic() - started >= (size - 64 * 1024) / 1e6


def test_at_most_max_in_flight_requests_are_served_at_once(remote_data_dir):
    with RangeHTTPServer(remote_data_dir, latency_s=0.1, max_in_flight=2) as store:
        codes: list[int] = []
        clients = [threading.Thread(target=lambda: codes.append(
            requests.get(store.url_for("small.txt"), timeout=30).status_code)) for _ in range(6)]
        started = time.monotonic()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        assert codes == [200] * 6
        assert store.load.most <= 2 and store.load.now == 0
        assert time.monotonic() - started >= 3 * 0.1  # six requests through two slots, 0.1 s each at least
        assert store.load.request_s >= 6 * 0.1


def _frames(dataset):
    return {int(s["index"]): s["observation.images.cam0"] for s in dataset}


def test_streaming_through_a_slow_store_gives_the_local_samples(av1_root):
    local = _frames(StreamingLeRobotDataset(root=av1_root, seed=4, episodes=[0, 1], return_uint8=True))
    with RangeHTTPServer(av1_root, latency_s=0.02, bandwidth=20e6, max_in_flight=3) as store:
        remote = _frames(StreamingLeRobotDataset(root=store.url, seed=4, episodes=[0, 1], return_uint8=True))
        assert 0 < store.load.most <= 3 and store.load.request_s > 0
    assert sorted(remote) == sorted(local) and all(remote[i].equal(local[i]) for i in local)
