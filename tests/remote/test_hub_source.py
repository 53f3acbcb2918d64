"""hf:// against a real local HTTP server emulating the Hugging Face Hub API (tests/remote/hub_server.py).

The module fixture points huggingface_hub at the emulator (environment and constants, see
`hub_server.huggingface_hub_at`), and a socket guard refuses any connection (or name lookup) that is not 127.0.0.1
for the duration of the module: no traffic can leave the machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import huggingface_hub
import pytest
import torch

from robostream import LeRobotDataset, StreamingLeRobotDataset
from robostream.errors import RobostreamError, TooLargeError
from robostream.storage.options import ReadOptions
from robostream.storage.retry import RetryPolicy
from robostream.storage.store import Storage

from .hub_server import HubServer, huggingface_hub_at
from .test_remote_sources import _assert_same

FAST_RETRY = RetryPolicy(max_attempts=6, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0)
FAST = ReadOptions(retry=FAST_RETRY)
REPO = "local/av1"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def hub(av1_root, tmp_path_factory) -> Iterator[HubServer]:
    """The emulator serving av1_root as dataset `local/av1` (small tree pages, so listings paginate), with
    huggingface_hub pointed at it and every non-loopback connection refused."""
    with (
        HubServer({REPO: av1_root}, page_size=5) as server,
        huggingface_hub_at(server.endpoint, tmp_path_factory.mktemp("hf_home")),
    ):
        yield server


def _resolve_requests(server: HubServer) -> list[tuple[str, str, int, int]]:
    return [r for r in server.log() if "/resolve/" in r[1] or r[1].startswith("/cdn/")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("revision", ["main", "sha"])
def test_hf_root_stream_equals_local(hub, av1_root, revision, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))  # metadata read here, not from a snapshot
    hub.reset_stats()
    rev = hub.sha if revision == "sha" else "main"
    remote = StreamingLeRobotDataset(root=f"hf://datasets/{REPO}@{rev}", seed=5, return_uint8=True, read_options=FAST)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=5, return_uint8=True))
    log = hub.log()
    assert remote.meta.storage.stats().bytes_read > 0
    assert any(status == 206 for _, path, status, _ in log if path.startswith("/cdn/")), "no ranged reads"
    assert any(status == 302 for _, _, status, _ in _resolve_requests(hub)), "LFS redirects not followed"
    listings = [path for _, path, _, _ in log if "/tree/" in path]
    assert listings, "the tree listing was not used"
    if int(huggingface_hub.__version__.split(".")[0]) >= 2:  # 2.x pages tree listings (1.x, lerobot's, does not)
        assert any("cursor=" in path for path in listings), "tree pagination not exercised"
    assert all(status < 400 for _, _, status, _ in _resolve_requests(hub))


@pytest.mark.timeout(120)
def test_repo_id_with_revision_pins_the_commit(hub, av1_root, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "empty_lerobot_home"))
    hub.reset_stats()
    remote = StreamingLeRobotDataset(repo_id=REPO, revision="main", seed=3, return_uint8=True, read_options=FAST)
    assert hub.sha in str(remote.meta.root)
    _assert_same(remote, StreamingLeRobotDataset(root=av1_root, seed=3, return_uint8=True))
    log = hub.log()
    assert ("GET", f"/api/datasets/{REPO}/revision/main", 200) in [(m, p, s) for m, p, s, _ in log]
    # every file read after the resolution names the pinned commit, never the branch
    reads = _resolve_requests(hub)
    assert reads and all(hub.sha in path and "/main/" not in path for _, path, _, _ in reads)


@pytest.mark.timeout(120)
def test_hf_root_map_style_equals_local(hub, av1_root):
    mapped = LeRobotDataset(root=f"hf://datasets/{REPO}", return_uint8=True, read_options=FAST)
    local = LeRobotDataset(root=av1_root, return_uint8=True)
    assert len(mapped) == len(local)
    for i in (0, 17, len(local) // 2, len(local) - 1):
        a, b = mapped[i], local[i]
        assert a.keys() == b.keys()
        for key, value in b.items():
            assert torch.equal(a[key], value) if isinstance(value, torch.Tensor) else a[key] == value, (i, key)


@pytest.mark.timeout(60)
def test_missing_repo_and_revision_are_clear(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "empty_lerobot_home"))
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    with pytest.raises(RepositoryNotFoundError):
        StreamingLeRobotDataset(repo_id="local/nope", revision="main", read_options=FAST)
    with pytest.raises(RevisionNotFoundError):
        StreamingLeRobotDataset(repo_id=REPO, revision="v9.9", read_options=FAST)
    with pytest.raises(RobostreamError, match="v9.9"):  # a revision in the URL that does not exist
        StreamingLeRobotDataset(root=f"hf://datasets/{REPO}@v9.9", read_options=FAST)


@pytest.mark.timeout(120)
def test_hf_stream_through_dataloader_worker_processes(hub, av1_root):
    """HfFileSystem (httpx client, thread pools) was used in the parent for the metadata; forked workers read
    the videos."""
    from torch.utils.data import DataLoader

    dataset = StreamingLeRobotDataset(
        root=f"hf://datasets/{REPO}@{hub.sha}", seed=1, return_uint8=True, read_options=FAST
    )
    ids = [i for batch in DataLoader(dataset, batch_size=8, num_workers=2) for i in batch["index"].tolist()]
    assert sorted(ids) == list(range(len(LeRobotDataset(root=av1_root))))


@pytest.mark.timeout(60)
def test_emulator_endpoints_used_by_huggingface_hub(hub, av1_root):
    """The endpoints the dataset flow above does not reach: paths-info (HfFileSystem.info with refresh), HEAD and
    suffix ranges on resolve, and typed 404s."""
    import requests
    from huggingface_hub import HfApi, HfFileSystem
    from huggingface_hub.errors import EntryNotFoundError

    fs = HfFileSystem(skip_instance_cache=True)
    name = "meta/info.json"
    info = fs.info(f"datasets/{REPO}@{hub.sha}/{name}", refresh=True)
    assert info["type"] == "file" and info["size"] == (av1_root / name).stat().st_size
    assert any(m == "POST" and "/paths-info/" in p for m, p, _, _ in hub.log())
    assert fs.cat_file(f"datasets/{REPO}/{name}") == (av1_root / name).read_bytes()
    assert not fs.exists(f"datasets/{REPO}/meta/nope.json")
    [folder] = HfApi().get_paths_info(REPO, "meta", repo_type="dataset", revision="main")
    assert folder.path == "meta" and not hasattr(folder, "size")  # a RepoFolder
    with pytest.raises(EntryNotFoundError):  # listing a file (or a missing path) is a typed 404
        list(HfApi().list_repo_tree(REPO, "meta/info.json", repo_type="dataset"))
    video = next(p for p in sorted(av1_root.rglob("*.mp4")))
    rel = video.relative_to(av1_root).as_posix()
    url = fs.url(f"datasets/{REPO}@main/{rel}")
    head = requests.head(url)  # not followed: the 302 itself
    assert head.status_code == 302 and int(head.headers["X-Linked-Size"]) == video.stat().st_size
    assert head.headers["X-Repo-Commit"] == hub.sha
    tail = requests.get(url, headers={"Range": "bytes=-100"})
    assert tail.status_code == 206 and tail.content == video.read_bytes()[-100:]
    past = requests.get(url, headers={"Range": f"bytes={video.stat().st_size}-"})
    assert past.status_code == 416


@pytest.mark.timeout(120)
def test_each_file_is_resolved_once_and_ranges_go_where_it_redirects(hub, av1_root):
    """A file's /resolve/ is asked once per process; its ranges go straight to the URL the Hub redirected to
    (one round trip each, not a redirect per range), with the same samples as local."""
    hub.reset_stats()
    mapped = LeRobotDataset(root=f"hf://datasets/{REPO}@{hub.sha}", return_uint8=True, read_options=FAST)
    local = LeRobotDataset(root=av1_root, return_uint8=True)
    for index in range(0, len(local), 3):
        assert torch.equal(mapped[index]["observation.images.cam0"], local[index]["observation.images.cam0"])
    resolved = [(method, path) for method, path, _, _ in hub.log() if "/resolve/" in path and path.endswith(".mp4")]
    assert resolved and len(resolved) == len(set(resolved)), "a video file was resolved more than once"
    assert {method for method, _ in resolved} == {"HEAD"}  # no bytes through /resolve/
    ranges = {
        path for _, path, status, _ in hub.log() if path.startswith("/cdn/") and path.endswith(".mp4") and status == 206
    }
    assert ranges == {path.replace(f"/datasets/{REPO}/resolve/", f"/cdn/{REPO}/") for _, path in resolved}


@pytest.mark.timeout(120)
def test_the_token_goes_to_the_hub_never_to_the_cdn(hub, av1_root):
    """The CDN is another origin (as on the real Hub): ranges go straight to the URL a file's /resolve/ names,
    and the token goes with the /resolve/ to the Hub only, never to the CDN, as huggingface_hub's own redirected
    requests (issue 32: the token went with every range to the host the Hub redirected to)."""
    hub.reset_stats()
    mapped = LeRobotDataset(root=f"hf://datasets/{REPO}@{hub.sha}", return_uint8=True, read_options=FAST)
    for index in (0, len(mapped) - 1):
        mapped[index]
    seen = hub.header_log()
    resolved = [headers for origin, _, path, headers in seen if origin == "hub" and "/resolve/" in path]
    at_cdn = [(method, headers) for origin, method, _, headers in seen if origin == "cdn"]
    assert resolved and all(h.get("authorization") == "Bearer hf_fake_local_token" for h in resolved)
    assert any(method == "GET" and "range" in headers for method, headers in at_cdn), "no ranged reads at the CDN"
    assert [headers for _, headers in at_cdn if "authorization" in headers] == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["meta/info.json", "meta/tasks.parquet"], ids=["from-the-hub", "from-the-cdn"])
def test_a_hub_file_read_whole_stops_at_its_bound(hub, av1_root, name):
    """A Hub repository's metadata file is read whole through the one bounded HTTP path (the Hub answers a small
    file itself, an LFS file's bytes come from the CDN): a file announcing more than the bound is refused unread."""
    storage = Storage(f"hf://datasets/{REPO}@{hub.sha}", ReadOptions(retry=FAST_RETRY))
    size = (av1_root / name).stat().st_size
    with pytest.raises(
        TooLargeError,
        match=rf"{name}: the server announces {size} bytes \(Content-Length\), more "
        rf"than the {size - 1} bytes a file read whole may hold",
    ):
        storage.read_bytes(name, limit=size - 1)
    assert storage.read_bytes(name, limit=size) == (av1_root / name).read_bytes()
