"""A slow store to measure against: a read-only HTTP/1.1 file server on 127.0.0.1 with Range support that answers
like an object store (first-byte latency, per-connection bandwidth, a cap on requests served at once), and counts
the requests it serves and how many were in flight. `robostream bench --store_latency_ms ...` serves a local
dataset through it; the remote-read tests use it (and build their fault-injecting proxy on its plumbing).

Two dialects: plain HTTP (:class:`RangeHTTPServer`, ``http://127.0.0.1:<port>/<path>``) and S3
(:class:`S3RangeServer`: path-style ``/<bucket>/<key>`` over a folder whose subfolders are buckets, with
GetObject/HeadObject, HeadBucket and ListObjectsV2 answered as S3 answers them, for s3fs/botocore and for the
Rust ``object_store`` crate that lance/LanceDB read with). Both wait, admit and count every request alike.
Nothing here leaves 127.0.0.1.
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


# --------------------------------------------------------------------------------------------------------------
# S3RangeServer: the same slow store, spoken to as S3 (path-style)
# --------------------------------------------------------------------------------------------------------------

S3_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
S3_MAX_KEYS = 1000  # S3's own cap on a listing page
_OBJECT_QUERY = {"versionId", "x-id", "partNumber"}  # and response-*: ignored (an unversioned, single-part object)
_LIST_QUERY = {
    "list-type",
    "prefix",
    "delimiter",
    "max-keys",
    "continuation-token",
    "start-after",
    "encoding-type",
    "fetch-owner",
    "x-id",
}


def _xml(root: Any) -> bytes:
    import xml.etree.ElementTree as ET

    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _element(parent: Any, tag: str, text: object = None) -> Any:
    import xml.etree.ElementTree as ET

    child = ET.SubElement(parent, tag)
    if text is not None:
        child.text = str(text)
    return child


def _iso8601(mtime: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mtime)) + f".{int(mtime * 1000) % 1000:03d}Z"


class S3Handler(RangeHandler):
    """RangeHandler answering path-style S3 requests (see :class:`S3RangeServer`)."""

    def if_none_match_holds(self, etag: str | None) -> bool:
        header = self.headers.get("If-None-Match")
        if header is None:
            return True
        listed = [tag.strip().removeprefix("W/") for tag in header.split(",")]  # weak comparison (RFC 9110)
        return not ("*" in listed or (etag is not None and etag in listed))

    def refuse(self, status: int, code: str, body: bytes, headers: dict[str, str]) -> None:
        self.s3_error(
            status,
            code,
            {
                412: "At least one of the pre-conditions you specified did not hold",
                416: "The requested range is not satisfiable",
            }.get(status, code),
            headers,
        )

    def s3_error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None, **fields: str
    ) -> None:
        """An S3 error answer: ``<Error><Code>..</Code><Message>..</Message>...</Error>`` (HEAD: no body)."""
        import xml.etree.ElementTree as ET

        error = ET.Element("Error")
        for tag, text in {"Code": code, "Message": message, **fields, "RequestId": "slow-store"}.items():
            _element(error, tag, text)
        self.send_plain(status, _xml(error), {"Content-Type": "application/xml", **(headers or {})})

    def _answer(self, owner: "RangeHTTPServer", send_body: bool) -> None:
        assert isinstance(owner, S3RangeServer)
        split = urllib.parse.urlsplit(self.path)
        url_path = urllib.parse.unquote(split.path)
        owner._count(url_path, 0, request=True)
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        bucket, _, key = url_path.lstrip("/").partition("/")
        if not bucket:
            if send_body:
                self._send_xml(owner.list_buckets())
            else:
                self.send_plain(200)
            return
        folder = owner.bucket_folder(bucket)
        if folder is None:
            self.s3_error(404, "NoSuchBucket", "The specified bucket does not exist", BucketName=bucket)
            return
        if not key:
            self._bucket_request(owner, bucket, query, send_body)
            return
        unknown = sorted(q for q in query if q not in _OBJECT_QUERY and not q.startswith("response-"))
        if unknown:
            self.s3_error(501, "NotImplemented", f"this slow store does not implement ?{unknown[0]}")
            return
        version_id = query.get("versionId", ["null"])[0]
        file = owner.object_file(folder, key)
        if file is None or version_id != "null":  # "null": the version id of an object in an unversioned bucket
            code = "NoSuchKey" if file is None else "NoSuchVersion"
            self.s3_error(
                404,
                code,
                "The specified key does not exist." if file is None else "The specified version does not exist.",
                Key=key,
                BucketName=bucket,
                Resource=url_path,
                **({} if file is None else {"VersionId": version_id}),
            )
            return
        with file.open("rb") as handle:  # the open file is one version, however the path is replaced meanwhile
            self._send_file(owner, url_path, handle, send_body)

    def _bucket_request(
        self, owner: "S3RangeServer", bucket: str, query: dict[str, list[str]], send_body: bool
    ) -> None:
        if self.command == "HEAD":  # HeadBucket
            self.send_plain(200, headers={"x-amz-bucket-region": owner.region})
        elif "location" in query:  # GetBucketLocation
            self._send_xml(_location(owner.region))
        elif query.get("list-type") == ["2"] and set(query) <= _LIST_QUERY:
            try:
                max_keys = int(query.get("max-keys", [str(S3_MAX_KEYS)])[0])
                if max_keys < 0:
                    raise ValueError(max_keys)
            except ValueError:
                self.s3_error(400, "InvalidArgument", "max-keys must be an integer from 0 up")
                return
            first = {name: values[0] for name, values in query.items()}
            self._send_xml(
                owner.list_objects_v2(
                    bucket,
                    prefix=first.get("prefix", ""),
                    delimiter=first.get("delimiter", ""),
                    max_keys=max_keys,
                    continuation_token=first.get("continuation-token"),
                    start_after=first.get("start-after", ""),
                    url_encoded=first.get("encoding-type") == "url",
                )
            )
        else:
            self.s3_error(501, "NotImplemented", "this slow store lists with ListObjectsV2 (list-type=2) only")

    def _send_xml(self, root: Any) -> None:
        self.send_plain(200, _xml(root), {"Content-Type": "application/xml"})


def _location(region: str) -> Any:
    import xml.etree.ElementTree as ET

    element = ET.Element("LocationConstraint", xmlns=S3_NAMESPACE)
    element.text = None if region == "us-east-1" else region  # us-east-1 is the empty constraint
    return element


class S3RangeServer(RangeHTTPServer):
    """The slow store in an S3 dialect: path-style S3 on ``127.0.0.1:<free port>`` over ``root``, each of whose
    subfolders is a bucket (``/<bucket>/<key>`` is ``<root>/<bucket>/<key>``), for s3fs/botocore and for the
    Rust ``object_store`` crate (LanceDB/lance) alike. Read-only; any credentials and signature are accepted.

    - GetObject/HeadObject: ``Range`` (206 + ``Content-Range``; 416 ``InvalidRange``), ``ETag`` (the MD5 of the
      content, as S3 gives single-part objects), ``Last-Modified`` (the file's mtime), ``Content-Length``;
      ``If-Match`` (412 ``PreconditionFailed``) and ``If-None-Match`` (304); ``versionId=null`` only (buckets
      are unversioned; another id: 404 ``NoSuchVersion``).
    - ``HEAD /<bucket>`` (HeadBucket), ``GET /<bucket>?location``, ``GET /`` (ListBuckets).
    - ``GET /<bucket>?list-type=2`` (ListObjectsV2): ``prefix``, ``delimiter`` (``CommonPrefixes``),
      ``max-keys`` (pages of at most ``page_size`` entries), ``continuation-token``, ``start-after``,
      ``encoding-type=url``; keys in UTF-8 binary order, each with ``LastModified``, ``ETag``, ``Size``,
      ``StorageClass``.
    - Missing key: 404 ``<Error><Code>NoSuchKey</Code>...<Key>..</Key>``; missing bucket: 404 ``NoSuchBucket``;
      anything else (writes, other subresources): 501 ``NotImplemented``.

    Every request, listings included, waits ``latency_s``, is admitted under ``max_in_flight`` and counted in
    ``stats()``/``summary()`` (by URL path; "bytes" are object bytes sent). ETags are MD5s hashed once per file
    version, so the first listing of a large folder reads it whole.

    >>> with S3RangeServer(tmp_dir, latency_s=0.05) as store:       # doctest: +SKIP
    ...     LeRobotDataset(root=store.s3_url("ds"), read_options=ReadOptions(storage_options=store.storage_options()))
    """

    _handler = S3Handler
    KEY = "slow-store"
    SECRET = "slow-store"

    def __init__(
        self,
        root: str | Path,
        *,
        latency_s: float = 0.0,
        bandwidth: float | None = None,
        max_in_flight: int | None = None,
        page_size: int = S3_MAX_KEYS,
        region: str = "us-east-1",
    ) -> None:
        """Args:
        root: a folder whose subfolders are the buckets.
        latency_s: seconds before the first byte of every answer (listings and errors too).
        bandwidth: bytes/s per connection for object bodies (None: as fast as it goes).
        max_in_flight: requests served at once; the others wait their turn (None: no cap).
        page_size: most entries (keys and common prefixes) in one ListObjectsV2 page (S3's: 1000).
        region: the region the buckets are in (HeadBucket, GetBucketLocation, the client options).
        """
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        super().__init__(
            root, etag=True, last_modified=True, latency_s=latency_s, bandwidth=bandwidth, max_in_flight=max_in_flight
        )
        self.page_size, self.region = page_size, region

    def start(self) -> "S3RangeServer":
        super().start()
        return self

    def s3_url(self, bucket: str, key: str = "") -> str:
        """``s3://<bucket>[/<key>]`` for a subfolder of ``root`` (ValueError when there is no such folder)."""
        if self.bucket_folder(bucket) is None:
            raise ValueError(f"{bucket!r}: no such folder in {self.root} (the buckets are its subfolders)")
        return f"s3://{bucket}" + (f"/{key.lstrip('/')}" if key else "")

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options for this store (robostream's ``ReadOptions(storage_options=...)``): its endpoint,
        its region and dummy credentials (never the environment's)."""
        return {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {"endpoint_url": self.url, "region_name": self.region},
        }

    def object_store_options(self) -> dict[str, str]:
        """Options for the Rust ``object_store`` crate (lance/LanceDB ``storage_options``): path-style requests
        to this endpoint over plain HTTP, with dummy credentials."""
        return {
            "aws_endpoint": self.url,
            "aws_region": self.region,
            "allow_http": "true",
            "aws_access_key_id": self.KEY,
            "aws_secret_access_key": self.SECRET,
            "aws_virtual_hosted_style_request": "false",
        }

    def bucket_folder(self, bucket: str) -> Path | None:
        """The folder of a bucket, or None (no such subfolder of ``root``)."""
        if not bucket or bucket in (".", "..") or "/" in bucket or "\\" in bucket:
            return None
        folder = self.root / bucket
        return folder if folder.is_dir() else None

    def object_file(self, folder: Path, key: str) -> Path | None:
        """The regular file a key names in a bucket's folder, or None (missing, a folder, or a ``..`` key).
        Symbolic links are followed, as in listings (a bucket may be a link to a dataset folder)."""
        if ".." in key.split("/"):
            return None
        candidate = folder / key
        return candidate if candidate.is_file() else None

    def list_buckets(self) -> Any:
        import xml.etree.ElementTree as ET

        result = ET.Element("ListAllMyBucketsResult", xmlns=S3_NAMESPACE)
        owner = _element(result, "Owner")
        _element(owner, "ID", "slow-store")
        buckets = _element(result, "Buckets")
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            bucket = _element(buckets, "Bucket")
            _element(bucket, "Name", folder.name)
            _element(bucket, "CreationDate", _iso8601(folder.stat().st_mtime))
        return result

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """A bucket's keys that start with ``prefix``, in S3's order (UTF-8 bytes); only the folder the prefix
        names is walked."""
        folder = self.bucket_folder(bucket)
        if folder is None:
            return []
        folder_of_prefix = prefix.rpartition("/")[0]
        if ".." in folder_of_prefix.split("/"):
            return []
        found = []
        for directory, _, files in os.walk(folder / folder_of_prefix):
            for name in files:
                key = (Path(directory) / name).relative_to(folder).as_posix()
                if key.startswith(prefix) and (Path(directory) / name).is_file():
                    found.append(key)
        return sorted(found, key=lambda k: k.encode())

    def list_objects_v2(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        max_keys: int = S3_MAX_KEYS,
        continuation_token: str | None = None,
        start_after: str = "",
        url_encoded: bool = False,
    ) -> Any:
        """The ListBucketResult element of one ListObjectsV2 page."""
        import base64
        import xml.etree.ElementTree as ET

        after = start_after
        if continuation_token:  # the last entry of the page before (a key or a common prefix)
            after = base64.urlsafe_b64decode(continuation_token.encode()).decode()
        limit = min(max_keys, self.page_size)
        entries: list[tuple[str, bool]] = []  # (key or common prefix, is a common prefix)
        truncated = False
        for key in self.keys(bucket, prefix):
            if key.encode() <= after.encode() or (delimiter and after.endswith(delimiter) and key.startswith(after)):
                continue
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            entry = (key[: cut + len(delimiter)], True) if cut >= 0 else (key, False)
            if entries and entries[-1] == entry:
                continue  # another key under the same common prefix
            if len(entries) == limit:
                truncated = True
                break
            entries.append(entry)
        encode = (lambda text: urllib.parse.quote(text, safe="/~")) if url_encoded else (lambda text: text)
        result = ET.Element("ListBucketResult", xmlns=S3_NAMESPACE)
        _element(result, "Name", bucket)
        _element(result, "Prefix", encode(prefix))
        if delimiter:
            _element(result, "Delimiter", encode(delimiter))
        _element(result, "MaxKeys", max_keys)
        if url_encoded:
            _element(result, "EncodingType", "url")
        key_count = _element(result, "KeyCount", len(entries))
        _element(result, "IsTruncated", "true" if truncated else "false")
        if continuation_token:
            _element(result, "ContinuationToken", continuation_token)
        if start_after:
            _element(result, "StartAfter", encode(start_after))
        if truncated:
            _element(result, "NextContinuationToken", base64.urlsafe_b64encode(entries[-1][0].encode()).decode())
        folder = self.bucket_folder(bucket)
        assert folder is not None
        for name, common in entries:
            if common:
                _element(_element(result, "CommonPrefixes"), "Prefix", encode(name))
                continue
            contents = _element(result, "Contents")
            _element(contents, "Key", encode(name))
            try:
                with (folder / name).open("rb") as handle:  # one version for its size, time and ETag
                    info = os.fstat(handle.fileno())
                    etag = self.etag_of(handle)
            except FileNotFoundError:  # removed since the walk
                result.remove(contents)
                key_count.text = str(int(key_count.text or 0) - 1)
                continue
            _element(contents, "LastModified", _iso8601(info.st_mtime))
            _element(contents, "ETag", etag)
            _element(contents, "Size", info.st_size)
            _element(contents, "StorageClass", "STANDARD")
        return result
