"""Constructing a dataset over HTTP reads metadata only, with a request count that does not grow with the dataset.

A counting HTTP server (Range support, per-path request counts) serves two generated datasets, one with a single
data file and one with many data and video files and five times the episodes; construction must read nothing
under data/ or videos/ and make the same number of requests for both.
"""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from robostream import LeRobotDataset, ReadOptions, StreamingLeRobotDataset
from robostream.storage.retry import RetryPolicy
from robostream.synth import SynthConfig, generate

from .servers import RangeHTTPServer

FAST = ReadOptions(retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0))
SMALL = SynthConfig(
    episodes=2,
    cameras=1,
    height=48,
    width=64,
    episode_length=10,
    state_dim=3,
    data_file_mb=100,
    video_file_mb=100,
    seed=1,
)
LARGE = SynthConfig(
    episodes=10,
    cameras=2,
    height=48,
    width=64,
    episode_length=10,
    state_dim=3,
    data_file_mb=0.004,
    video_file_mb=0.01,
    seed=2,
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    roots = {
        name: generate(tmp_path_factory.mktemp(name) / "ds", config)
        for name, config in (("small", SMALL), ("large", LARGE))
    }
    with RangeHTTPServer(roots["small"]) as small, RangeHTTPServer(roots["large"]) as large:
        yield {"small": (roots["small"], small), "large": (roots["large"], large)}


def _construction_requests(server, make):
    server.reset_stats()
    dataset = make(root=server.url, read_options=FAST)
    return dataset, {path: s["requests"] for path, s in server.stats().items()}


@pytest.mark.parametrize("make", [StreamingLeRobotDataset, LeRobotDataset], ids=["stream", "map"])
def test_construction_requests_are_flat_in_dataset_size(servers, make):
    small_root, small = servers["small"]
    large_root, large = servers["large"]
    assert len(list(large_root.glob("data/*/*.parquet"))) >= 3 > len(list(small_root.glob("data/*/*.parquet")))
    _, small_requests = _construction_requests(small, make)
    dataset, large_requests = _construction_requests(large, make)
    for requests in (small_requests, large_requests):
        assert all("/meta/" in path for path in requests), f"construction read data or video: {requests}"
    assert sum(small_requests.values()) == sum(large_requests.values()), (small_requests, large_requests)
    # Reading still works, and only then do data files get requested.
    loader = DataLoader(dataset, batch_size=4, num_workers=0)
    assert len(next(iter(loader))["index"]) == 4
    assert any("/data/" in path for path in large.stats())
