"""A slow store to measure against: a read-only HTTP/1.1 file server on 127.0.0.1 with Range support that answers
like an object store (first-byte latency, per-connection bandwidth, a cap on requests served at once), and counts
the requests it serves and how many were in flight. `robostream bench --store_latency_ms ...` serves a local
dataset through it; the remote-read tests use it (and build their fault-injecting proxy on its plumbing).

Plain HTTP here (:class:`RangeHTTPServer`, ``http://127.0.0.1:<port>/<path>``); the S3 dialect, which waits, admits
and counts every request alike, is :mod:`robostream.testing.s3_dialect`. Nothing here leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
CHUNK = 64 * 1024
JOIN_TIMEOUT_S = 5.0


# --------------------------------------------------------------------------------------------------------------
# Shared plumbing: a threaded HTTP server on 127.0.0.1:0 that can be stopped cleanly.
# --------------------------------------------------------------------------------------------------------------


class TrackingHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers its open connections and handler threads.

    ``stop()`` shuts the open sockets down (waking threads blocked in reads of idle keep-alive connections) and
    joins the handler threads with a bounded timeout, so a stopped server leaves nothing running.
    """

    daemon_threads = True
    block_on_close = False  # we join our own threads, with a timeout
    # Connections waiting to be accepted, as a real store's listener holds them: socketserver's default (5) drops
    # the handshakes of a client opening more at once, which then wait for a SYN retransmit (1 s and more).
    request_queue_size = 1024

    def __init__(self, owner: Any, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__((HOST, 0), handler)
        self.owner = owner
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run_request,
            args=(request, client_address),
            daemon=True,
            name=f"{type(self.owner).__name__}-conn",
        )
        with self._lock:
            self._conns.add(request)
            self._handler_threads.add(thread)
        thread.start()

    def _run_request(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._conns.discard(request)
                self._handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that go away mid-response (timeouts, our own injected faults) are expected here.
        log.debug("error while handling a request from %s", client_address, exc_info=True)

    def close_connections(self) -> None:
        """Shut down every open client connection and wait (bounded) for the handler threads to finish."""
        with self._lock:
            conns, threads = list(self._conns), list(self._handler_threads)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in threads:
            thread.join(JOIN_TIMEOUT_S)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive) handler base that logs to ``logging`` instead of stderr."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle's algorithm on, the body of every answer after the
    # first on a kept-alive connection waits for the client's delayed ACK (40 ms on Linux), a stall no object
    # store has. TCP_NODELAY, as real servers set it.
    disable_nagle_algorithm = True
    server: TrackingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s: " + format, type(self.server.owner).__name__, *args)

    def send_plain(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """A complete response with a fixed-length body."""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


class BackgroundServer:
    """Start/stop/context-manager logic shared by :class:`RangeHTTPServer` and :class:`FaultProxy`."""

    _handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self._httpd: TrackingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # set by stop(); long waits (stalls) wait on it

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not running; call start() or use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> "BackgroundServer":
        if self._httpd is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._stopping.clear()
        self._httpd = TrackingHTTPServer(self, self._handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"{type(self).__name__}-serve",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, interrupt stalls, close open connections and join every thread. Idempotent."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S)
        self._httpd = self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------------------
# RangeHTTPServer
# --------------------------------------------------------------------------------------------------------------


class RangeNotSatisfiable(ValueError):
    """The Range header is well formed but selects no byte of the file (answer 416)."""


def parse_byte_range(header: str | None, size: int) -> range | None:
    """The byte range a ``Range`` header selects from a file of ``size`` bytes.

    Returns ``None`` to serve the whole file (no header, a malformed header or several ranges: RFC 9110 lets a
    server ignore those), a ``range(start, stop)`` for ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n``, and raises
    :class:`RangeNotSatisfiable` when the range starts at or past the end of the file (or is ``bytes=-0``).
    """
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    first, last = first.strip(), last.strip()
    if not dash or not (first.isdigit() or (not first and last.isdigit())) or (last and not last.isdigit()):
        return None
    if not first:  # suffix range: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiable(header)
        return range(max(0, size - n), size)
    start = int(first)
    if last and int(last) < start:
        return None  # invalid (last < first): ignore the header
    if start >= size:
        raise RangeNotSatisfiable(header)
    stop = size if not last else min(int(last) + 1, size)
    return range(start, stop)


def if_match_holds(header: str | None, etag: str | None) -> bool:
    """RFC 9110 If-Match: true without the header, for ``*`` (the file exists), or when one of the listed ETags
    equals ``etag`` by strong comparison (weak ETags never match)."""
    if header is None:
        return True
    listed = [tag.strip() for tag in header.split(",")]
    if "*" in listed:
        return True
    return etag is not None and not etag.startswith("W/") and etag in listed


class RangeHandler(QuietHandler):
    server: TrackingHTTPServer

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._serve(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        owner: RangeHTTPServer = self.server.owner
        with owner.load.admitted():
            if owner.latency_s:  # a real store's first byte comes this much after the request
                owner._stopping.wait(owner.latency_s)
            self._answer(owner, send_body)

    def _answer(self, owner: "RangeHTTPServer", send_body: bool) -> None:
        url_path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        owner._count(url_path, 0, request=True)
        file = owner.resolve(url_path)
        if file is None:
            self.send_plain(404, b"not found\n", {"Content-Type": "text/plain"})
            return
        with file.open("rb") as handle:  # the open file is one version, however the path is replaced meanwhile
            self._send_file(owner, url_path, handle, send_body)

    def validators(self, handle: BinaryIO, etag: str | None) -> dict[str, str]:
        """The headers that name the version of an open file every answer about it carries."""
        headers = {"ETag": etag} if etag else {}
        if self.server.owner.send_last_modified:  # the file's modification time, whole seconds
            headers["Last-Modified"] = email.utils.formatdate(os.fstat(handle.fileno()).st_mtime, usegmt=True)
        return headers

    def if_none_match_holds(self, etag: str | None) -> bool:
        """Plain HTTP ignores If-None-Match here (the S3 dialect answers 304 when it matches)."""
        return True

    def refuse(self, status: int, code: str, body: bytes, headers: dict[str, str]) -> None:
        """A 412 or 416 answer (`code`: its name in the S3 dialect)."""
        self.send_plain(status, body, {"Content-Type": "text/plain", **headers} if body else headers)

    def _send_file(self, owner: "RangeHTTPServer", url_path: str, handle: BinaryIO, send_body: bool) -> None:
        size = os.fstat(handle.fileno()).st_size
        etag = owner.etag_of(handle)
        validators = self.validators(handle, etag)
        if not if_match_holds(self.headers.get("If-Match"), etag):
            self.refuse(412, "PreconditionFailed", b"precondition failed\n", validators)
            return
        if not self.if_none_match_holds(etag):
            self.send_plain(304, headers=validators)
            return
        try:
            byte_range = parse_byte_range(self.headers.get("Range"), size)
        except RangeNotSatisfiable:
            self.refuse(416, "InvalidRange", b"", {"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"})
            return
        selected = byte_range if byte_range is not None else range(0, size)
        self.send_response(206 if byte_range is not None else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(selected)))
        for name, value in validators.items():
            self.send_header(name, value)
        if byte_range is not None:
            self.send_header("Content-Range", f"bytes {selected.start}-{selected.stop - 1}/{size}")
        self.end_headers()
        if send_body:
            began = time.monotonic()
            handle.seek(selected.start)  # only the range is read: a store serves GB files range by range
            for start in range(selected.start, selected.stop, CHUNK):
                chunk = handle.read(min(CHUNK, selected.stop - start))
                owner._count(url_path, len(chunk))  # before it goes out: a client holding it finds it counted
                self.wfile.write(chunk)
                if owner.bandwidth:  # one connection's rate: the next chunk waits until this one's time is up
                    owner._stopping.wait(
                        max(0.0, began + (start + len(chunk) - selected.start) / owner.bandwidth - time.monotonic())
                    )


class InFlight:
    """Requests a server is answering: admits at most `limit` at once (None: any number), and keeps the most seen
    at once, the request-seconds spent (their mean in flight over a span is request-seconds / span) and the CPU
    seconds the answering threads used (what the store costs the machine it shares with the readers)."""

    def __init__(self, limit: int | None) -> None:
        self._slots = threading.BoundedSemaphore(limit) if limit else None
        self._lock = threading.Lock()
        self.now = self.most = 0
        self.request_s = self.cpu_s = 0.0

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        if self._slots is not None:
            self._slots.acquire()
        started, cpu_started = time.monotonic(), time.thread_time()
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1
                self.request_s += time.monotonic() - started
                self.cpu_s += time.thread_time() - cpu_started
            if self._slots is not None:
                self._slots.release()

    def reset(self) -> None:
        """Forget the most seen, the request-seconds and CPU seconds (requests in flight now stay counted)."""
        with self._lock:
            self.most, self.request_s, self.cpu_s = self.now, 0.0, 0.0


class RangeHTTPServer(BackgroundServer):
    """Read-only HTTP/1.1 file server for ``root`` on ``127.0.0.1:<free port>``.

    GET and HEAD; single ``Range: bytes=a-b | a- | -n`` requests get 206 with ``Content-Range``, unsatisfiable
    ones 416; every response has ``Content-Length`` and ``Accept-Ranges: bytes``; missing files get 404; no
    directory listings. ``stats()`` counts requests and body bytes sent per URL path (thread-safe).

    ``etag=True`` (default): answers carry a strong ``ETag`` (the MD5 of the content, so a file replaced with other
    bytes of the same size and timestamp still gets a new one) and ``If-Match`` is honoured (412 when no listed
    ETag matches). ``etag=False``: no ETag, and If-Match only matches ``*``. ``last_modified=True``: answers carry
    ``Last-Modified`` (the file's modification time). Files may be replaced while serving: each answer is read from
    one version of the file.

    A slow store, as object stores are: ``latency_s`` before the first byte of every answer, ``bandwidth`` bytes/s
    per connection, at most ``max_in_flight`` requests served at once (the others wait their turn, as a throttled
    store makes them); ``load`` counts requests in flight (the most at once, and request-seconds).

    >>> with RangeHTTPServer(tmp_dir) as srv:          # doctest: +SKIP
    ...     requests.get(srv.url_for("a/b.bin"), headers={"Range": "bytes=0-9"})
    """

    _handler = RangeHandler

    def __init__(
        self,
        root: str | Path,
        *,
        etag: bool = True,
        last_modified: bool = False,
        latency_s: float = 0.0,
        bandwidth: float | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        super().__init__()
        self.root = Path(root).resolve()
        self.send_etag, self.send_last_modified = etag, last_modified
        self.latency_s, self.bandwidth = latency_s, bandwidth
        self.load = InFlight(max_in_flight)
        self._etags: dict[tuple[int, int, int, int], str] = {}  # file identity -> ETag
        self._stats_lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._bytes: Counter[str] = Counter()

    def start(self) -> "RangeHTTPServer":
        super().start()
        return self

    def hash_files(self) -> None:
        """Every served file's ETag (its MD5) now, links to folders followed (the S3 dialect's buckets): a
        benchmark's first request of a file then never waits for a whole file's hash."""
        for folder, _, names in os.walk(self.root, followlinks=True):
            for name in names:
                with open(os.path.join(folder, name), "rb") as handle:
                    self.etag_of(handle)

    def url_for(self, relpath: str | Path) -> str:
        """Full URL of a file given relative to ``root`` (percent-encoded)."""
        return f"{self.url}/{urllib.parse.quote(Path(relpath).as_posix().lstrip('/'))}"

    def resolve(self, url_path: str) -> Path | None:
        """The regular file under ``root`` that a URL path names, or ``None`` (missing, a directory, or outside)."""
        candidate = (self.root / url_path.lstrip("/")).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            return None
        return candidate if candidate.is_file() else None

    def etag_of(self, handle: BinaryIO) -> str | None:
        """The MD5 of an open file's content (a file replaced with other bytes of the same size and timestamp still
        gets a new one), hashed once per version: keyed by the file's identity, inode and modification time."""
        if not self.send_etag:
            return None
        info = os.fstat(handle.fileno())
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with self._stats_lock:
            known = self._etags.get(key)
        if known is None:
            digest = hashlib.md5()
            handle.seek(0)
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
            known = f'"{digest.hexdigest()}"'
            with self._stats_lock:
                self._etags[key] = known
        return known

    def stats(self) -> dict[str, dict[str, int]]:
        """``{url_path: {"requests": n, "bytes": body_bytes_sent}}`` since start or the last ``reset_stats()``."""
        with self._stats_lock:
            return {p: {"requests": self._requests[p], "bytes": self._bytes[p]} for p in self._requests}

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._requests.clear()
            self._bytes.clear()
        self.load.reset()

    def summary(self, span_s: float) -> dict[str, float | int]:
        """Requests and body bytes served since the last reset, the most in flight at once, the mean in flight
        over the `span_s` seconds that passed, and the CPU seconds spent answering."""
        with self._stats_lock:
            requests, sent = sum(self._requests.values()), sum(self._bytes.values())
        return {
            "requests": requests,
            "bytes": sent,
            "in_flight_max": self.load.most,
            "in_flight_mean": self.load.request_s / span_s if span_s > 0 else 0.0,
            "cpu_s": self.load.cpu_s,
        }

    def _count(self, url_path: str, nbytes: int, request: bool = False) -> None:
        with self._stats_lock:
            if request:
                self._requests[url_path] += 1
            self._bytes[url_path] += nbytes
