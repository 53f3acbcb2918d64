"""Servers that misbehave on purpose (issues 21 and 32): credentials never follow a redirect to another host, nor
reach a message or a file; every wait has a deadline; an answer that is not the bytes asked for is an error, never
a wrong frame or a cache entry; no answer fills the memory."""

from __future__ import annotations

import base64
import shutil
import time
import traceback
from functools import partial
from pathlib import Path

import pytest

from robostream import LeRobotDataset, ReadOptions
from robostream.errors import FileChangedError, RobostreamError, TooLargeError
from robostream.storage.retry import RemoteReadError, RetryPolicy
from robostream.storage.store import Storage
from robostream.testing.slow_store import QuietHandler, RangeHandler, RangeHTTPServer

FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, timeout_s=5)
SECRETS = {"Authorization": "Bearer do-not-leak", "X-Api-Key": "do-not-leak-either"}
pytestmark = pytest.mark.timeout(120)


class _Recording(RangeHandler):
    """A RangeHTTPServer handler that records every request: (method, path, headers)."""

    def _serve(self, send_body: bool) -> None:
        self.server.owner.seen.append((self.command, self.path, dict(self.headers)))
        super()._serve(send_body)


class RecordingServer(RangeHTTPServer):
    _handler = _Recording

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.seen: list[tuple[str, str, dict[str, str]]] = []


class _Redirect(QuietHandler):
    def _redirect(self) -> None:
        owner = self.server.owner
        owner.seen.append((self.command, self.path, dict(self.headers)))
        if owner.via_home and not self.path.startswith("/hop/"):
            location = "/hop" + self.path  # first to itself, then elsewhere
        else:
            location = owner.target + self.path.removeprefix("/hop")
        self.send_plain(owner.status, headers={"Location": location})

    do_GET = do_HEAD = _redirect  # noqa: N815 - stdlib naming


class RedirectServer(RangeHTTPServer):
    """Answers every request with `status` to the same path on `target` (another origin: another port); with
    `via_home`, through a redirect to itself first (home -> home -> other)."""

    _handler = _Redirect

    def __init__(self, target: str, status: int = 307, via_home: bool = False) -> None:
        super().__init__(Path("."))
        self.target, self.status, self.via_home = target, status, via_home
        self.seen: list[tuple[str, str, dict[str, str]]] = []


def _carries_secrets(headers: dict[str, str]) -> bool:
    return any(name.lower() in (key.lower() for key in headers) for name in SECRETS)


def test_credentials_never_follow_a_redirect_to_another_host(tmp_path):
    (tmp_path / "f.bin").write_bytes(bytes(range(256)) * 1000)
    with RecordingServer(tmp_path) as elsewhere, RedirectServer(elsewhere.url) as home:
        storage = Storage(home.url, ReadOptions(storage_options={"headers": SECRETS}, retry=FAST_RETRY))
        reader = storage.open("f.bin")
        assert reader.read(1000) == (bytes(range(256)) * 4)[:1000]
        assert storage.size("f.bin") == 256_000
    assert home.seen and all(h.get("Authorization") == SECRETS["Authorization"] for _, _, h in home.seen)
    assert elsewhere.seen and not any(_carries_secrets(h) for _, _, h in elsewhere.seen)


@pytest.mark.parametrize(
    "status, via_home", [(302, False), (307, False), (307, True)], ids=["302", "307", "home-home-other"]
)
def test_no_read_of_a_dataset_takes_credentials_to_another_host(av1_root, tmp_path, monkeypatch, status, via_home):
    """Every request a dataset makes, whole metadata files included (issue 32: they went through fsspec, whose
    aiohttp strips only Authorization on a redirect: X-Api-Key reached the other origin 3 times per construction),
    keeps storage_options' headers with the root's origin."""
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))
    with RecordingServer(av1_root) as elsewhere, RedirectServer(elsewhere.url, status, via_home) as home:
        dataset = LeRobotDataset(
            root=home.url, read_options=ReadOptions(retry=FAST_RETRY, storage_options={"headers": SECRETS})
        )
        for index in (0, len(dataset) - 1):
            dataset[index]
    whole = {path for method, path, h in elsewhere.seen if method == "GET" and "Range" not in h}
    assert {"/meta/info.json", "/meta/tasks.parquet"} <= whole, whole  # the whole-file reads went there
    assert any("Range" in h for _, _, h in elsewhere.seen) and any(m == "HEAD" for m, _, _ in elsewhere.seen)
    assert [(m, p) for m, p, h in elsewhere.seen if _carries_secrets(h)] == []
    assert all(h.get("X-Api-Key") == SECRETS["X-Api-Key"] for _, _, h in home.seen)


def test_a_streaming_pass_takes_no_credentials_to_another_host(av1_root, tmp_path, monkeypatch):
    """The streaming path's reads too: a file's opening read (a data file's footer, a video's head, which also tell
    its version), the rows read ahead and the video bytes fetched ahead, through a redirect home -> home -> other."""
    from robostream import StreamingLeRobotDataset

    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))
    with RecordingServer(av1_root) as elsewhere, RedirectServer(elsewhere.url, 307, True) as home:
        dataset = StreamingLeRobotDataset(
            root=home.url, read_options=ReadOptions(retry=FAST_RETRY, storage_options={"headers": SECRETS})
        )
        for _, _ in zip(range(20), dataset):
            pass
    ranged = {path for method, path, h in elsewhere.seen if method == "GET" and "Range" in h}
    assert any(p.endswith(".parquet") and p.startswith("/data/") for p in ranged), ranged  # the footer's read
    assert any(p.endswith(".mp4") for p in ranged), ranged
    assert [(m, p) for m, p, h in elsewhere.seen if _carries_secrets(h)] == []
    assert all(h.get("X-Api-Key") == SECRETS["X-Api-Key"] for _, _, h in home.seen)


class _Trickle(QuietHandler):
    """Sends its status line and headers one byte at a time, forever (until the client gives up)."""

    def _trickle(self) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n" * 1000:
            if self.server.owner._stopping.wait(0.2):
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return

    do_GET = do_HEAD = _trickle  # noqa: N815


class TrickleServer(RangeHTTPServer):
    _handler = _Trickle


def test_a_server_trickling_its_headers_cannot_hold_a_reader(tmp_path):
    """Each socket read gets a byte in time; only a whole-request deadline ends it (urllib waited forever)."""
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, timeout_s=1)
    with TrickleServer(tmp_path) as server:
        started = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"f.bin \(size\): still failing after 2 attempts"):
            Storage(server.url, ReadOptions(retry=policy)).size("f.bin")
        assert time.monotonic() - started < 20  # 2 x 1 s deadlines, never the 1000 s the trickle would last


class _ShiftedRange(RangeHandler):
    """Answers a Range request with the bytes one block further on, labelled as such (Content-Range honest
    about what it sent, not what was asked): a server or proxy bug that must never give wrong frames."""

    def _serve(self, send_body: bool) -> None:
        header = self.headers.get("Range")
        if header and header.startswith("bytes=") and not header.endswith("-"):
            start, end = (int(v) for v in header[len("bytes=") :].split("-"))
            size = (self.server.owner.root / self.path.lstrip("/")).stat().st_size
            shift = min(4096, size - 1 - end)
            if shift > 0:
                self.headers.replace_header("Range", f"bytes={start + shift}-{end + shift}")
        super()._serve(send_body)


class ShiftedRangeServer(RangeHTTPServer):
    _handler = _ShiftedRange


def test_a_wrong_content_range_is_an_error_and_never_cached(av1_root, tmp_path):
    cache = tmp_path / "cache"
    with ShiftedRangeServer(av1_root) as server:
        # 16 KiB blocks (a small read buffer): every file of the fixture takes several range requests
        options = ReadOptions(retry=FAST_RETRY, cache_dir=cache, cache_limit="50mb", read_buffer=64 << 10)
        with pytest.raises(RemoteReadError, match=r"asked for bytes \d+-\d+, the server sent bytes \d+-\d+"):
            LeRobotDataset(root=server.url, read_options=options)[0]
    originals = {p.read_bytes() for p in av1_root.rglob("*") if p.is_file()}
    cached = [p for p in cache.rglob("*") if p.is_file() and p.suffix in (".mp4", ".parquet")]
    assert all(p.read_bytes() in originals for p in cached)  # only files small enough to come whole, unshifted


def test_a_wrong_content_range_for_a_files_opening_read_is_an_error(tmp_path):
    (tmp_path / "f.bin").write_bytes(bytes(range(256)) * 400)
    with ShiftedRangeServer(tmp_path) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY))
        with pytest.raises(
            RemoteReadError, match=r"f\.bin: asked for bytes 0-19999 of 102400, the server sent bytes 4096-"
        ):
            storage.open("f.bin", first_bytes=20_000)


def test_a_file_that_shrinks_after_its_size_was_read_is_a_changed_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100_000)
    with RangeHTTPServer(tmp_path, etag=False) as server:  # no ETag: only sizes tell versions apart
        reader = Storage(server.url, ReadOptions(retry=FAST_RETRY)).open("f.bin")
        path.write_bytes(b"y" * 10_000)
        reader.seek(90_000)
        with pytest.raises(FileChangedError, match="f.bin: changed on the server during the epoch"):
            reader.read(100)


def test_a_redirect_to_a_non_http_url_is_refused(tmp_path):
    class _ToFile(QuietHandler):
        def do_HEAD(self) -> None:  # noqa: N802
            self.send_plain(302, headers={"Location": "file:///etc/passwd"})

    class ToFileServer(RangeHTTPServer):
        _handler = _ToFile

    with ToFileServer(tmp_path) as server:
        with pytest.raises(RemoteReadError, match="redirected to file:///etc/passwd, which is not an http"):
            Storage(server.url, ReadOptions(retry=FAST_RETRY)).size("f.bin")


HUGE = 10 << 30


class _Endless(QuietHandler):
    """HEAD: a small Content-Length (`head_size`); GET: an endless body (up to 10 GiB), announced as 10 GiB
    (`announce`) or not at all (read to the end of the connection). Counts the body bytes that went out before the
    client hung up."""

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(self.server.owner.head_size))
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        owner = self.server.owner
        self.send_response(200)
        if owner.announce:
            self.send_header("Content-Length", str(HUGE))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        chunk = b"{" * (64 << 10)
        while owner.sent < HUGE and not owner._stopping.is_set():
            try:
                self.wfile.write(chunk)
            except OSError:  # the client hung up
                return
            owner.sent += len(chunk)


class EndlessServer(RangeHTTPServer):
    _handler = _Endless

    def __init__(self, *, announce: bool, head_size: int = 1000) -> None:
        super().__init__(Path("."))
        self.announce, self.head_size = announce, head_size
        self.sent = 0


def test_a_metadata_file_announcing_10_gib_is_refused_unread(tmp_path, monkeypatch):
    """Issue 32: an info.json answered with Content-Length 10 GiB had 2.6 GB buffered before a ulimit stopped it."""
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))
    with EndlessServer(announce=True) as server:
        with pytest.raises(
            TooLargeError,
            match=r"meta/info.json: the server announces 10737418240 bytes "
            r"\(Content-Length\), more than the 268435456 bytes a file read "
            "whole may hold .*; nothing was read",
        ):
            LeRobotDataset(root=server.url, read_options=ReadOptions(retry=FAST_RETRY))
    assert server.sent < 64 << 20  # what the sockets' buffers took before the client hung up


@pytest.mark.parametrize("bound", ["size first seen", "limit"])
def test_an_endless_body_stops_at_the_size_first_seen_or_the_bound(bound):
    with EndlessServer(announce=False) as server:
        storage = Storage(server.url, ReadOptions(retry=FAST_RETRY))
        if bound == "size first seen":
            assert storage.size("f.bin") == 1000  # a HEAD
            expected, read = "the 1000 bytes first seen", storage.read_bytes
        else:
            expected, read = "the 1048576 bytes a file read whole may hold", partial(storage.read_bytes, limit=1 << 20)
        with pytest.raises(TooLargeError, match=rf"f.bin: the server sent more than {expected}.*; stopped reading"):
            read("f.bin")
    assert server.sent < 64 << 20


USER, PASSWORD = "reader", "pw-9f2c-secret"


class _BasicAuth(RangeHandler):
    """Serves only requests that carry USER:PASSWORD as basic auth."""

    def _serve(self, send_body: bool) -> None:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_plain(401, b"who are you?\n", {"WWW-Authenticate": 'Basic realm="data"'})
            return
        super()._serve(send_body)


class BasicAuthServer(RangeHTTPServer):
    _handler = _BasicAuth


def test_credentials_in_the_url_never_reach_a_message_or_a_file(av1_root, tmp_path, monkeypatch):
    """Issue 32: http://user:password@host/... appeared in every error message, and in the cache's files."""
    root = shutil.copytree(av1_root, tmp_path / "ds")
    monkeypatch.setenv("ROBOSTREAM_CACHE", str(tmp_path / "node_cache"))
    options = ReadOptions(retry=FAST_RETRY, cache_dir=tmp_path / "cache", cache_limit="50mb")
    with BasicAuthServer(root) as server:
        dataset = LeRobotDataset(root=server.url.replace("://", f"://{USER}:{PASSWORD}@"), read_options=options)
        dataset[0]  # the credentials were sent: the server answers nothing without them
        last_file = max((root / "videos").rglob("*.mp4"))
        last_file.unlink()
        with pytest.raises(RobostreamError, match="not found") as info:
            dataset[len(dataset) - 1]
    told = "".join(traceback.format_exception(info.value))
    assert last_file.name in told and PASSWORD not in told and USER not in told
    written = [p for folder in ("cache", "node_cache") for p in (tmp_path / folder).rglob("*") if p.is_file()]
    assert written and not [p for p in written if PASSWORD.encode() in p.read_bytes() or PASSWORD in str(p)]


def test_a_slow_body_names_the_deadline_it_missed(tmp_path):
    """Issue 32: a body slower than the deadline ended with "(last error FSTimeoutError: )"."""
    (tmp_path / "f.bin").write_bytes(b"x" * 100_000)
    policy = RetryPolicy(max_attempts=1, timeout_s=0.5)
    with RangeHTTPServer(tmp_path, bandwidth=1000) as server:  # 100 s for the whole body
        url = server.url
        with pytest.raises(RemoteReadError) as info:
            Storage(url, ReadOptions(retry=policy)).read_bytes("f.bin")
    assert str(info.value) == (
        f"{url}/f.bin: still failing after 1 attempts (last error FSTimeoutError: timed out "
        "(RetryPolicy.timeout_s=0.5 s per request)); check the server or raise RetryPolicy.timeout_s (a slow link or "
        "a large answer)"
    )


@pytest.mark.parametrize("name", ["headers", "auth", "cookies"])
def test_session_wide_credentials_are_refused(name):
    """aiohttp sends a session's own headers, auth and cookies to every host, those a redirect names too: refused,
    naming where credentials go instead."""
    with pytest.raises(
        ValueError,
        match=rf"storage_options\['client_kwargs'\] \['{name}'\] would be sent to every "
        r"host a redirect names.*storage_options\['headers'\]",
    ):
        Storage("http://127.0.0.1:1/ds", ReadOptions(storage_options={"client_kwargs": {name: SECRETS}}))
