"""A mixture of many remote sources opens them concurrently, with a constant number of requests per source, and a
second construction on the node reads their metadata from the node cache (format/metadata_snapshot.py): no request
for a Hub source pinned to a commit, a constant number per source that can change (over HTTP, which cannot list:
info.json, tasks.parquet and stats.json read whole, a HEAD of each episodes file and of the first missing one; on S3
a listing of meta/), and a source whose metadata changed is read anew, never served from the old snapshot.

Each source is a copy of one tiny one-episode dataset, served by a real server on 127.0.0.1 with a first-byte
latency, so requests of different sources only overlap when they are made concurrently.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from robostream import Mixture, ReadOptions, Source, StreamingLeRobotDataset
from robostream.errors import DatasetFormatError
from robostream.storage.retry import RetryPolicy
from robostream.synth import SynthConfig, generate
from robostream.testing.hub_store import HubServer
from robostream.testing.s3_dialect import S3RangeServer
from robostream.testing.slow_store import RangeHTTPServer

from .hub_server import huggingface_hub_at

pytestmark = pytest.mark.timeout(180)
SOURCES = 50
TINY = SynthConfig(episodes=1, cameras=1, height=48, width=64, episode_length=8, state_dim=2, seed=3)
RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=10.0)
LATENCY_S = 0.02


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A folder with a bucket folder `srcs` holding SOURCES copies of one tiny dataset (src-00, src-01, ...)."""
    one = generate(tmp_path_factory.mktemp("one") / "ds", TINY)
    root = tmp_path_factory.mktemp("served")
    for i in range(SOURCES):
        shutil.copytree(one, root / "srcs" / f"src-{i:02d}")
    return root


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    """A node cache of this test's own (the derived folder holds the metadata snapshots)."""
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))


def _mixture(urls, options=None):
    return StreamingLeRobotDataset(
        mixture=Mixture(sources=[Source(root=url) for url in urls]),
        seed=0,
        return_uint8=True,
        read_options=ReadOptions(retry=RETRY, **(options or {})),
    )


def _per_source(stats):
    """Requests per source (the URL path's source folder) and per file under it."""
    out: dict[str, Counter] = {}
    for path, counts in stats.items():
        parts = path.strip("/").split("/")
        out.setdefault(parts[1], Counter())["/".join(parts[2:])] += counts["requests"]
    return out


def _move_revision(served, source):
    """A new revision of a source's metadata: info.json rewritten (another robot_type), replaced atomically."""
    path = served / "srcs" / source / "meta" / "info.json"
    info = json.loads(path.read_text())
    info["robot_type"] = "moved"
    (path.parent / "info.tmp").write_text(json.dumps(info, indent=4))
    os.replace(path.parent / "info.tmp", path)


def test_http_sources_open_concurrently_then_from_the_node_cache(served, node_cache):
    with RangeHTTPServer(served, latency_s=LATENCY_S) as server:
        urls = [f"{server.url}/srcs/src-{i:02d}" for i in range(SOURCES)]
        cold = _mixture(urls)
        per_source = _per_source(server.stats())
        assert sorted(per_source) == [f"src-{i:02d}" for i in range(SOURCES)]
        first = per_source["src-00"]
        assert all(counts == first for counts in per_source.values()), "requests differ between equal sources"
        assert all(name.startswith("meta/") for name in first), f"construction read data or video: {first}"
        assert sum(first.values()) <= 8, first
        # More than one source's requests (5 at most, asked at once) in flight: sources open concurrently.
        assert server.load.most >= 8, f"at most {server.load.most} requests in flight: sources opened one by one"
        # One HTTP client, block cache and read-ahead per process for all sources: connections, threads and fetched
        # bytes do not grow with the sources.
        assert len({id(r.meta.data_storage.fs) for r in cold.sources}) == 1
        assert len({id(r.meta.data_storage.blocks) for r in cold.sources}) == 1

        server.reset_stats()
        warm = _mixture(urls)
        small = {
            name: (served / "srcs/src-00" / name).stat().st_size
            for name in ("meta/info.json", "meta/tasks.parquet", "meta/stats.json")
        }
        episodes = {"meta/episodes/chunk-000/file-000.parquet": 0, "meta/episodes/chunk-000/file-001.parquet": 0}
        assert server.stats() == {
            f"/srcs/src-{i:02d}/{name}": {"requests": 1, "bytes": size}
            for i in range(SOURCES)
            for name, size in {**small, **episodes}.items()
        }, "a second construction read more than the small meta files and a HEAD of each episodes file"
        assert [r.meta.info.total_frames for r in warm.sources] == [r.meta.info.total_frames for r in cold.sources]

        _move_revision(served, "src-07")
        server.reset_stats()
        moved = _mixture(urls)
        assert moved.sources[7].meta.info.robot_type == "moved", "a snapshot of the old revision was served"
        assert all(r.meta.info == c.meta.info for i, (r, c) in enumerate(zip(moved.sources, cold.sources)) if i != 7)
        per_source = _per_source(server.stats())
        assert sum(per_source["src-07"].values()) == sum(first.values())  # read anew
        assert all(sum(c.values()) == len(small) + len(episodes) for name, c in per_source.items() if name != "src-07")
        # Read last: its rows and bytes fetched ahead in the background would count among the constructions' reads.
        assert len(next(iter(DataLoader(cold, batch_size=4)))["index"]) == 4


def test_s3_sources_check_their_revision_with_one_listing(served, node_cache):
    count = 10
    with S3RangeServer(served, latency_s=LATENCY_S) as store:
        urls = [f"s3://srcs/src-{i:02d}" for i in range(count)]
        options = {"storage_options": store.storage_options()}
        cold = _mixture(urls, options)
        cold_requests = sum(s["requests"] for s in store.stats().values())
        assert cold_requests <= 7 * count, store.stats()
        store.reset_stats()
        _mixture(urls, options)
        assert store.stats() == {"/srcs": {"requests": count, "bytes": 0}}, "not one listing of meta/ per source"

        _move_revision(served, "src-03")
        store.reset_stats()
        moved = _mixture(urls, options)
        assert moved.sources[3].meta.info.robot_type == "moved", "a snapshot of the old revision was served"
        assert cold.sources[3].meta.info.robot_type != "moved"
        assert any("/src-03/meta/info.json" in path for path in store.stats())


@pytest.mark.parametrize("pinned", [True, False], ids=["at_commit", "at_branch"])
def test_hub_sources_pinned_to_a_commit_open_without_a_request(served, node_cache, tmp_path, pinned):
    repos = {f"local/src-{i:02d}": served / "srcs" / f"src-{i:02d}" for i in range(SOURCES)}
    with HubServer(repos, latency_s=LATENCY_S) as hub, huggingface_hub_at(hub.endpoint, tmp_path / "hf_home"):
        revision = hub.sha if pinned else "main"
        urls = [f"hf://datasets/{repo}@{revision}" for repo in repos]
        _mixture(urls)
        assert hub.load.most >= 8, f"at most {hub.load.most} requests in flight: sources opened one by one"
        hub.reset_stats()
        warm = _mixture(urls)
        log = hub.log()
        if pinned:
            assert log == [], f"a source pinned to a commit made requests from the node cache: {log[:5]}"
        else:  # the branch is resolved to its commit, once per source, and nothing else is asked
            assert sorted(path for _, path, _, _ in log) == sorted(
                f"/api/datasets/{repo}/revision/main" for repo in repos
            ), log[:5]
        assert all(hub.sha in r.meta.root for r in warm.sources)


def test_a_source_that_fails_to_open_fails_construction_naming_it(served, node_cache):
    with RangeHTTPServer(served, latency_s=LATENCY_S) as server:
        urls = [f"{server.url}/srcs/src-{i:02d}" for i in range(SOURCES)]
        urls[23] = f"{server.url}/srcs/no-such-source"
        with pytest.raises(DatasetFormatError, match="no-such-source/meta/info.json: not found") as failure:
            _mixture(urls)
        assert any("source 23" in note and "no-such-source" in note for note in failure.value.__notes__)
