"""Local, in-process servers for testing remote (HTTP / S3) dataset sources.

Everything here listens on 127.0.0.1 only, binds port 0 (a free port chosen by the OS) and runs in background
threads that the context managers start and stop. Nothing talks to the internet.

* :class:`RangeHTTPServer` -- the slow store (robostream/testing/slow_store.py, re-exported here): a read-only
  static file server with HTTP ``Range`` support, ``ETag`` + ``If-Match``, per-path counters, and optional
  latency, bandwidth and a cap on requests in flight.
* :class:`S3Server` -- moto's S3 in a thread, plus helpers to upload a directory and build s3fs options.
* :class:`FaultProxy` -- a reverse proxy that injects deterministic faults (dropped bodies, error statuses,
  stalls, connection resets, corrupted bodies) in front of either of the above.

Only the standard library, ``moto`` and ``boto3`` are imported at module level; the two client helpers at the
bottom (:func:`http_filesystem`, :func:`s3_filesystem`) import fsspec/aiohttp/s3fs lazily.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import struct
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from robostream.testing.slow_store import (
    HOST,
    BackgroundServer,
    QuietHandler,
    RangeHTTPServer,
    RangeNotSatisfiable,
    TrackingHTTPServer,
    if_match_holds,
    parse_byte_range,
)

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------
# S3Server (moto)
# --------------------------------------------------------------------------------------------------------------


class S3Server:
    """moto's S3 (``ThreadedMotoServer``) on ``127.0.0.1:<free port>``, with fixed fake credentials.

    Note: moto keeps its state in process-wide backends, so every S3Server (and any ``mock_aws``) in one process
    sees the same buckets; ``reset()`` wipes all of them.
    """

    KEY = "testing"
    SECRET = "testing"
    REGION = "us-east-1"

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
        self._endpoint_url: str | None = None

    @property
    def endpoint_url(self) -> str:
        if self._endpoint_url is None:
            raise RuntimeError("S3Server is not running; call start() or use it as a context manager")
        return self._endpoint_url

    def start(self) -> "S3Server":
        if self._endpoint_url is not None:
            raise RuntimeError("S3Server already started")
        self._server.start()
        host, port = self._server.get_host_and_port()
        self._endpoint_url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        if self._endpoint_url is not None:
            self._server.stop()
            self._endpoint_url = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, endpoint_url: str | None = None, total_max_attempts: int | None = None) -> Any:
        """A boto3 S3 client with explicit fake credentials (never the environment's or ~/.aws)."""
        import boto3
        from botocore.config import Config

        config = None
        if total_max_attempts is not None:
            config = Config(retries={"total_max_attempts": total_max_attempts, "mode": "standard"})
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=self.REGION,
            aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET,
            config=config,
        )

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (no error when it already exists)."""
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def upload_dir(self, bucket: str, local_dir: str | Path, prefix: str = "") -> list[str]:
        """Create ``bucket`` and upload every file under ``local_dir`` as ``prefix + relative/posix/path``.

        Returns the uploaded keys, sorted.
        """
        self.create_bucket(bucket)
        client, root = self.client(), Path(local_dir)
        keys = []
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            key = prefix + file.relative_to(root).as_posix()
            client.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
            keys.append(key)
        return keys

    def reset(self) -> None:
        """Delete all moto state (every bucket) through moto's reset API."""
        conn = http.client.HTTPConnection(*self._server.get_host_and_port(), timeout=10)
        try:
            conn.request("POST", "/moto-api/reset")
            conn.getresponse().read()
        finally:
            conn.close()

    def storage_options(
        self,
        endpoint_url: str | None = None,
        *,
        total_max_attempts: int | None = None,
        read_timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> dict[str, Any]:
        """fsspec/s3fs options for this server (or for ``endpoint_url``, e.g. a :class:`FaultProxy` in front).

        ``total_max_attempts`` caps botocore's attempts per call, first one included (1 = no botocore retries;
        beware: botocore's ``retries={"max_attempts": n}`` counts RETRIES, i.e. n + 1 attempts).
        s3fs has its OWN retry loop on top (``S3FileSystem.retries``, 5 by default, not a constructor option):
        set ``fs.retries = 1`` on the instance too, see :func:`s3_filesystem`. aiohttp (under aiobotocore) may
        still resend an idempotent request once after a connection reset, whatever these settings say.
        """
        config: dict[str, Any] = {}
        if total_max_attempts is not None:
            config["retries"] = {"total_max_attempts": total_max_attempts, "mode": "standard"}
        if read_timeout is not None:
            config["read_timeout"] = read_timeout
        if connect_timeout is not None:
            config["connect_timeout"] = connect_timeout
        options: dict[str, Any] = {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {"endpoint_url": endpoint_url or self.endpoint_url, "region_name": self.REGION},
        }
        if config:
            options["config_kwargs"] = config
        return options


# --------------------------------------------------------------------------------------------------------------
# FaultProxy
# --------------------------------------------------------------------------------------------------------------

FaultKind = Literal["drop_mid_body", "status", "stall", "reset", "corrupt"]

_S3_ERROR_CODES = {500: "InternalError", 503: "SlowDown", 429: "TooManyRequests", 403: "AccessDenied"}


@dataclass(frozen=True)
class Fault:
    """One injected fault. Build with :func:`drop_mid_body`, :func:`http_status`, :func:`stall`, :func:`reset`.

    kind:
      * ``drop_mid_body`` -- forward upstream, send the status line, headers (with the full Content-Length) and
        ``nbytes`` of the body (default: half), then close the socket (FIN): the client sees a short body.
      * ``status`` -- answer ``status`` (with ``Retry-After`` if given) without contacting the upstream.
      * ``stall`` -- hold the request ``seconds`` without answering, then close; with ``after_bytes`` set, forward
        and send headers plus that many body bytes first (a read stall mid-body). Interrupted by ``stop()``.
      * ``reset`` -- close the connection with a TCP RST and no response at all.
      * ``corrupt`` -- forward upstream and relay the answer whole, status and headers unchanged, with one body byte
        flipped (at ``nbytes``, default the middle): bytes that differ from what the server's listing says.
    """

    kind: FaultKind
    status: int = 503
    retry_after: str | None = None
    body: bytes | None = None
    seconds: float = 30.0
    nbytes: int | None = None
    after_bytes: int | None = None


def drop_mid_body(nbytes: int | None = None) -> Fault:
    """Send headers and ``nbytes`` body bytes (default half the body; always < the full body), then close."""
    return Fault("drop_mid_body", nbytes=nbytes)


def http_status(status: int = 503, retry_after: float | str | None = None, body: bytes | None = None) -> Fault:
    """Answer ``status`` directly. The default body is an S3-style XML error (``SlowDown`` for 503)."""
    return Fault("status", status=status, retry_after=None if retry_after is None else str(retry_after), body=body)


def stall(seconds: float = 30.0, after_bytes: int | None = None) -> Fault:
    """Hang for ``seconds`` (longer than the client's timeout), before answering or after ``after_bytes``."""
    return Fault("stall", seconds=seconds, after_bytes=after_bytes)


def reset() -> Fault:
    """Abort the connection (RST) without any response."""
    return Fault("reset")


def corrupt(offset: int | None = None) -> Fault:
    """Relay the upstream answer with the body byte at ``offset`` (default: the middle) inverted."""
    return Fault("corrupt", nbytes=offset)


FaultPlan = Callable[[int, str, str], Fault | None]
"""``(request_number, method, path) -> Fault | None``; ``request_number`` counts matched requests from 1."""

RequestMatcher = Callable[[str, str], bool]
"""``(method, path) -> bool``: which requests the plan sees (others are forwarded untouched and not numbered)."""


@dataclass(frozen=True)
class ProxyEvent:
    """One request the proxy handled: its number among matched requests (0 if unmatched) and the fault, if any."""

    number: int
    method: str
    path: str
    fault: FaultKind | None


def plan_from_sequence(faults: Iterable[Fault | None]) -> FaultPlan:
    """A plan giving the i-th matched request the i-th item (``None`` = forward); forward all once exhausted."""
    iterator: Iterator[Fault | None] = iter(faults)

    def plan(number: int, method: str, path: str) -> Fault | None:
        return next(iterator, None)

    return plan


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
}


class _ProxyHandler(QuietHandler):
    server: TrackingHTTPServer

    def do_GET(self) -> None:  # noqa: N802
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _handle(self) -> None:
        proxy: FaultProxy = self.server.owner
        body = self._read_request_body()
        fault = proxy._next_fault(self.command, self.path)
        if fault is None:
            self._relay(*self._forward(body))
        elif fault.kind == "reset":
            self._abort(rst=True)
        elif fault.kind == "status":
            self._send_status_fault(fault)
        elif fault.kind == "stall" and fault.after_bytes is None:
            proxy._stopping.wait(fault.seconds)
            self._abort(rst=False)
        elif fault.kind == "corrupt":
            status, reason, headers, payload = self._forward(body)
            if payload:
                at = min(len(payload) // 2 if fault.nbytes is None else fault.nbytes, len(payload) - 1)
                payload = payload[:at] + bytes([payload[at] ^ 0xFF]) + payload[at + 1 :]
            self._relay(status, reason, headers, payload)
        else:  # drop_mid_body, or a stall after part of the body
            status, reason, headers, payload = self._forward(body)
            if fault.kind == "stall":
                cut = min(fault.after_bytes or 0, len(payload))
            else:
                cut = len(payload) // 2 if fault.nbytes is None else fault.nbytes
                cut = max(0, min(cut, len(payload) - 1))
            self._relay(status, reason, headers, payload[:cut], content_length=len(payload))
            if fault.kind == "stall":
                proxy._stopping.wait(fault.seconds)
            self._abort(rst=False)

    # -- request side -----------------------------------------------------------------------------------------

    def _read_request_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline().strip():  # trailers, up to the blank line
                    pass
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # CRLF after each chunk

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send the request upstream; return (status, reason, end-to-end headers, full body)."""
        proxy: FaultProxy = self.server.owner
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = proxy.upstream_netloc
        if body or self.command in ("PUT", "POST", "PATCH"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=proxy.upstream_timeout)
        try:
            conn.request(self.command, proxy.upstream_prefix + self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            upstream_length = resp.getheader("Content-Length")
            if self.command == "HEAD" and upstream_length is not None:
                kept.append(("Content-Length", upstream_length))  # HEAD: advertise the size, send no body
            return resp.status, resp.reason, kept, payload
        finally:
            conn.close()

    # -- response side ----------------------------------------------------------------------------------------

    def _relay(
        self,
        status: int,
        reason: str,
        headers: list[tuple[str, str]],
        payload: bytes,
        content_length: int | None = None,
    ) -> None:
        self.send_response(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD" and status not in (204, 304):
            self.send_header("Content-Length", str(len(payload) if content_length is None else content_length))
        self.end_headers()
        if payload and self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _send_status_fault(self, fault: Fault) -> None:
        body = fault.body
        if body is None:
            code = _S3_ERROR_CODES.get(fault.status, "InjectedFault")
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>injected fault</Message></Error>"
            ).encode()
        headers = {"Content-Type": "application/xml"}
        if fault.retry_after is not None:
            headers["Retry-After"] = fault.retry_after
        self.send_plain(fault.status, body, headers)

    def _abort(self, rst: bool) -> None:
        """Close the client connection now: a FIN (``rst=False``) or a TCP RST (``rst=True``)."""
        self.close_connection = True
        sock = self.connection
        try:
            if rst:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # linger 0: RST
                # The fd is only released (and the RST sent) once the makefile() wrappers are closed too.
                self.wfile.close()
                self.rfile.close()
                sock.close()
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class FaultProxy(BackgroundServer):
    """Reverse proxy on ``127.0.0.1:<free port>`` in front of ``upstream`` (an ``http://host:port[/prefix]`` URL),
    injecting faults from a deterministic plan.

    ``plan`` is a callable :data:`FaultPlan`, a sequence/iterable of ``Fault | None`` (one per matched request,
    then no more faults), or ``None`` (a transparent proxy). ``match`` restricts which requests are numbered and
    offered to the plan (e.g. only GETs: ``match=lambda m, p: m == "GET"``). Forwarding copies the method,
    path + query, end-to-end headers (``Range``, ``Authorization``, ... ; ``Host`` is rewritten to the upstream)
    and body; responses are buffered and relayed with a ``Content-Length``. Works for path-style S3 against moto
    (moto does not check SigV4 signatures).
    """

    _handler = _ProxyHandler

    def __init__(
        self,
        upstream: str,
        plan: FaultPlan | Iterable[Fault | None] | None = None,
        *,
        match: RequestMatcher | None = None,
        upstream_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise ValueError(f"upstream must be an http:// URL, got {upstream!r}")
        self.upstream = upstream
        self.upstream_host: str = parsed.hostname
        self.upstream_port: int = parsed.port or 80
        self.upstream_netloc: str = parsed.netloc
        self.upstream_prefix: str = parsed.path.rstrip("/")
        self.upstream_timeout = upstream_timeout
        self._match = match
        self._lock = threading.Lock()
        self._plan: FaultPlan | None = None
        self._events: list[ProxyEvent] = []
        self._matched = 0
        self.set_plan(plan)

    def start(self) -> "FaultProxy":
        super().start()
        return self

    # -- constructors -----------------------------------------------------------------------------------------

    @classmethod
    def every_nth(cls, upstream: str, n: int, fault: Fault, **kwargs: Any) -> "FaultProxy":
        """Fault matched requests n, 2n, 3n, ...; forward the others."""
        if n < 1:
            raise ValueError("n must be >= 1")
        return cls(upstream, lambda number, method, path: fault if number % n == 0 else None, **kwargs)

    @classmethod
    def first_k(cls, upstream: str, k: int, fault: Fault, **kwargs: Any) -> "FaultProxy":
        """Fault the first ``k`` matched requests, then forward everything."""
        return cls(upstream, lambda number, method, path: fault if number <= k else None, **kwargs)

    @classmethod
    def always(cls, upstream: str, fault: Fault, **kwargs: Any) -> "FaultProxy":
        """Fault every matched request (until ``set_plan``/``clear_faults``)."""
        return cls(upstream, lambda number, method, path: fault, **kwargs)

    # -- plan and stats ---------------------------------------------------------------------------------------

    def set_plan(self, plan: FaultPlan | Iterable[Fault | None] | None) -> None:
        """Replace the plan (request numbering continues)."""
        if plan is not None and not callable(plan):
            plan = plan_from_sequence(plan)
        with self._lock:
            self._plan = plan

    def clear_faults(self) -> None:
        """From now on forward everything untouched."""
        self.set_plan(None)

    def _next_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            fault = None
            number = 0
            if self._match is None or self._match(method, path):
                self._matched += 1
                number = self._matched
                if self._plan is not None:
                    fault = self._plan(number, method, path)
            self._events.append(ProxyEvent(number, method, path, fault.kind if fault else None))
            return fault

    def events(self) -> list[ProxyEvent]:
        """Every request handled so far, in arrival order."""
        with self._lock:
            return list(self._events)

    def stats(self) -> dict[str, Any]:
        """``{"requests", "matched", "forwarded", "faults", "by_kind": {kind: n}}`` since start / reset_stats()."""
        with self._lock:
            kinds = Counter(e.fault for e in self._events if e.fault)
            return {
                "requests": len(self._events),
                "matched": self._matched,
                "forwarded": sum(1 for e in self._events if e.fault is None),
                "faults": sum(kinds.values()),
                "by_kind": dict(kinds),
            }

    def reset_stats(self) -> None:
        """Forget events and restart request numbering at 1 (the plan object itself is kept)."""
        with self._lock:
            self._events.clear()
            self._matched = 0


# --------------------------------------------------------------------------------------------------------------
# Client helpers (lazy imports: fsspec, aiohttp, s3fs)
# --------------------------------------------------------------------------------------------------------------


def http_filesystem(timeout: float | None = None, **kwargs: Any) -> Any:
    """A fresh (not instance-cached) fsspec ``HTTPFileSystem``; ``timeout`` is aiohttp's total per-request timeout."""
    import aiohttp
    import fsspec

    client_kwargs = dict(kwargs.pop("client_kwargs", {}))
    if timeout is not None:
        client_kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout)
    return fsspec.filesystem("http", client_kwargs=client_kwargs, skip_instance_cache=True, **kwargs)


def s3_filesystem(storage_options: dict[str, Any], s3fs_retries: int | None = None) -> Any:
    """A fresh (not instance-cached) ``S3FileSystem``; ``s3fs_retries`` overrides s3fs's own retry loop
    (``S3FileSystem.retries``, default 5), which is separate from botocore's (``config_kwargs["retries"]``)."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **storage_options)
    if s3fs_retries is not None:
        fs.retries = s3fs_retries
    return fs


__all__: Sequence[str] = [
    "HOST",
    "RangeHTTPServer",
    "RangeNotSatisfiable",
    "parse_byte_range",
    "S3Server",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "RequestMatcher",
    "ProxyEvent",
    "FaultProxy",
    "plan_from_sequence",
    "drop_mid_body",
    "http_status",
    "stall",
    "reset",
    "corrupt",
    "if_match_holds",
    "http_filesystem",
    "s3_filesystem",
]


# name -> size in bytes of the deterministic files served by every fixture server
DATA_FILES: dict[str, int] = {
    "blob.bin": 200_000,
    "small.txt": 37,
    "empty.bin": 0,
    "nested/dir/chunk-000.bin": 70_001,
    "with space/a b.bin": 1_234,
}


def make_data_dir(root: Path, files: dict[str, int] = DATA_FILES, seed: int = 0) -> Path:
    """Write deterministic pseudo-random files (``name -> size``) under ``root``; return ``root``."""
    rng = random.Random(seed)
    for name, size in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
    return root


# Starts a fault-injecting proxy in front of a URL, stopped after the test (the `make_fault_proxy` fixture).
MakeFaultProxy = Callable[..., FaultProxy]
