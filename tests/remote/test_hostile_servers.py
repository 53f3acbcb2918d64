"""Servers that misbehave on purpose (issue 21): credentials never follow a redirect to another host, every wait
has a deadline, and an answer that is not the bytes asked for is an error, never a wrong frame or a cache entry."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from robostream import LeRobotDataset, ReadOptions
from robostream.errors import FileChangedError
from robostream.storage.retry import RemoteReadError, RetryPolicy
from robostream.storage.store import Storage

from robostream.bench.slow_store import QuietHandler, RangeHandler, RangeHTTPServer

FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, timeout_s=5)
SECRETS = {"Authorization": "Bearer do-not-leak", "X-Api-Key": "do-not-leak-either"}
pytestmark = pytest.mark.timeout(120)


class _Recording(RangeHandler):
    """A RangeHTTPServer handler that records the headers of every request."""

    def _serve(self, send_body: bool) -> None:
        self.server.owner.seen.append(dict(self.headers))
        super()._serve(send_body)


class RecordingServer(RangeHTTPServer):
    _handler = _Recording

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.seen: list[dict[str, str]] = []


class _Redirect(QuietHandler):
    def _redirect(self) -> None:
        owner = self.server.owner
        owner.seen.append(dict(self.headers))
        self.send_plain(307, headers={"Location": owner.target + self.path})

    do_GET = do_HEAD = _redirect  # noqa: N815 - stdlib naming


class RedirectServer(RangeHTTPServer):
    """Answers every request with 307 to the same path on `target` (another origin: another port)."""

    _handler = _Redirect

    def __init__(self, target: str) -> None:
        super().__init__(Path("."))
        self.target = target
        self.seen: list[dict[str, str]] = []


def test_credentials_never_follow_a_redirect_to_another_host(tmp_path):
    (tmp_path / "f.bin").write_bytes(bytes(range(256)) * 1000)
    with RecordingServer(tmp_path) as elsewhere, RedirectServer(elsewhere.url) as home:
        storage = Storage(home.url, {"headers": SECRETS}, retry=FAST_RETRY)
        reader = storage.open("f.bin")
        assert reader.read(1000) == (bytes(range(256)) * 4)[:1000]
        assert storage.size("f.bin") == 256_000
    assert home.seen and all(h.get("Authorization") == SECRETS["Authorization"] for h in home.seen)
    assert elsewhere.seen and all(name not in h for h in elsewhere.seen for name in SECRETS)


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
            Storage(server.url, retry=policy).size("f.bin")
        assert time.monotonic() - started < 20  # 2 x 1 s deadlines, never the 1000 s the trickle would last


class _ShiftedRange(RangeHandler):
    """Answers a Range request with the bytes one block further on, labelled as such (Content-Range honest
    about what it sent, not what was asked): a server or proxy bug that must never give wrong frames."""

    def _serve(self, send_body: bool) -> None:
        header = self.headers.get("Range")
        if header and header.startswith("bytes=") and not header.endswith("-"):
            start, end = (int(v) for v in header[len("bytes="):].split("-"))
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


def test_a_file_that_shrinks_after_its_size_was_read_is_a_changed_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100_000)
    with RangeHTTPServer(tmp_path, etag=False) as server:  # no ETag: only sizes tell versions apart
        reader = Storage(server.url, retry=FAST_RETRY).open("f.bin")
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
            Storage(server.url, retry=FAST_RETRY).size("f.bin")
