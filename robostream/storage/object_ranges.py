"""Ranged GETs of http(s):// and s3:// files through obstore (Rust's object_store: the request, its headers and its
body handled off the GIL, ~0.2-0.4 ms of client CPU per GET against ~0.7-1 ms through fsspec's loop and aiohttp).

Each answer keeps the integrity rules of every other ranged read: If-Match with the strong ETag, and the answer's
range, total size and ETag handed back (as a storage.http.Answer) for check_range_answer to judge. obstore's own
retries are off (RetryPolicy is the one place that retries): an error status becomes a StatusError carrying it
(503 SlowDown and 429 then retried and counted as throttles), a failed connection or body a ConnectionError or
TimeoutError. obstore does not expose Retry-After: after a throttle the store's requests go through aiohttp or s3fs
for THROTTLE_BYPASS_S, so the retries and what follows are paced as the store asks. Any other complaint obstore has about
an answer (a server that ignores Range, a Content-Range that is not the range asked for, no Content-Length, a 416)
returns None: the caller asks again through aiohttp (storage/http.py), which judges that answer as before.

obstore's runtime (tokio's threads) does not survive a fork: a child of a process that started it hangs on its first
request. DataLoader forks its workers from the process that built the dataset, so obstore serves DataLoader worker
processes only (`usable_here`), and never a process whose runtime an ancestor started; every other process reads
through aiohttp and s3fs as before. And credentials go to the origin the user named only, which obstore cannot
promise everywhere: on a redirect to another host reqwest drops Authorization but forwards custom headers (an API
key) and S3's x-amz-security-token. So `object_ranges_allowed` routes through obstore only what carries nothing of
that kind: HTTP roots without headers, request options or a user and password, S3 roots with an explicit key and
secret and no session token (every other S3 set-up, botocore's credential chain included, stays on s3fs).
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import obstore
from obstore.exceptions import PreconditionError
from obstore.store import HTTPStore, S3Store

from robostream.storage.http import Answer, Home
from robostream.storage.redact import redact_url
from robostream.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import ClientConfig, RetryConfig, S3Config

_STATUS = re.compile(r"non-2xx status code: (\d{3})")
# reqwest's words for a request or body that failed in transit (a reset, a refused connection, a truncated body)
_TRANSPORT = ("error sending request", "error decoding response body", "connection", "Connection")
_TIMEOUT = ("timed out", "TimedOut", "operation timed out")
# s3fs storage options that obstore is given here (the rest of an S3 set-up keeps s3fs)
_S3_OPTIONS = frozenset(("key", "secret", "client_kwargs", "config_kwargs"))
_S3_CLIENT = frozenset(("endpoint_url", "region_name"))
_S3_CONFIG = frozenset(("connect_timeout", "read_timeout", "retries", "max_pool_connections"))


_RUNTIME: list[int] = []  # the process whose request started obstore's runtime
THROTTLE_BYPASS_S = 30.0  # after a 429 or 503, a store's requests go where Retry-After is read, this long
_THROTTLES = (429, 503)


def usable_here() -> bool:
    """Whether this process may send obstore requests: a DataLoader worker, whose runtime no ancestor started."""
    # a DataLoader worker has imported torch.utils.data: asking needs no import of torch (the command line's
    # parser imports storage, and must not pay for torch)
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None and _RUNTIME in ([], [os.getpid()])


class StatusError(OSError):
    """An HTTP error status obstore met (retry.http_status reads `status`: 5xx, 408 and 429 are retried)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def object_ranges_allowed(*, protocol: str, url: str, options: Mapping[str, Any], home: Home) -> bool:
    """Whether ranged reads of this root may go through obstore with every credential kept to its origin.

    Args:
        protocol: the root's protocol ("http", "https", "s3", ...).
        url: the root as the user named it.
        options: the fsspec storage options in force (defaults merged in).
        home: the root's origin and the request options sent there only.
    """
    if protocol in ("http", "https"):
        parts = urlsplit(url)
        client = options.get("client_kwargs") or {}
        return (
            not home.request_options
            and parts.username is None
            and parts.password is None
            and set(client) <= {"timeout"}
        )
    if protocol in ("s3", "s3a"):
        return (
            set(options) <= _S3_OPTIONS
            and bool(options.get("key"))
            and bool(options.get("secret"))
            and set(options.get("client_kwargs") or {}) <= _S3_CLIENT
            and set(options.get("config_kwargs") or {}) <= _S3_CONFIG
        )
    return False


class ObjectRanges:
    """One process's obstore clients for the roots of one protocol and options: one store per HTTP origin or S3
    bucket, made on first use (obstore's clients own a runtime and connections: they never cross a fork, see
    Storage's per-process reading state)."""

    def __init__(self, *, protocol: str, options: Mapping[str, Any], policy: RetryPolicy) -> None:
        """
        Args:
            protocol: "http", "https", "s3" or "s3a".
            options: the fsspec storage options in force (object_ranges_allowed said yes to them).
            policy: the retry policy: its timeout_s bounds each request unless the options set a read timeout.
        """
        self._protocol = protocol
        self._options = options
        config = options.get("config_kwargs") or {}
        timeout = float(config.get("read_timeout") or policy.timeout_s)
        connect = float(config.get("connect_timeout") or timeout)
        self._client: ClientConfig = {
            "allow_http": True,
            "timeout": datetime.timedelta(seconds=timeout),
            "connect_timeout": datetime.timedelta(seconds=connect),
        }
        self._retry: RetryConfig = {"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=timeout)}
        self._stores: dict[str, Any] = {}
        self._throttled_until: dict[str, float] = {}  # per store: monotonic time obstore serves it again
        self._lock = threading.Lock()

    def _store(self, key: str) -> Any:
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = self._make(key)
            return store

    def _make(self, key: str) -> Any:
        if self._protocol in ("http", "https"):
            return HTTPStore.from_url(key, client_options=self._client, retry_config=self._retry)
        client = self._options.get("client_kwargs") or {}
        config: S3Config = {
            "access_key_id": self._options["key"],
            "secret_access_key": self._options["secret"],
            "region": client.get("region_name") or "us-east-1",
            **({"endpoint": client["endpoint_url"]} if client.get("endpoint_url") else {}),
        }
        return S3Store(key, config=config, client_options=self._client, retry_config=self._retry)

    def range(self, *, path: str, start: int, end: int, if_match: str | None) -> Answer | None:
        """GET bytes [start, end) of the file at `path` (an http(s) URL, or an s3 "bucket/key"), If-Match when
        known; None where the answer is for aiohttp or s3fs to judge (see the module's docstring).

        Args:
            path: the file's full location as Storage names it.
            start: the first byte asked for.
            end: the byte after the last one asked for.
            if_match: the strong ETag the answer's file must have (None: not known).
        """
        if self._protocol in ("http", "https"):
            parts = urlsplit(path)
            where, key = f"{parts.scheme}://{parts.netloc}", unquote(parts.path.lstrip("/"))
        else:
            where, _, key = path.partition("/")
        if time.monotonic() < self._throttled_until.get(where, 0.0):
            return None
        store = self._store(where)
        options: GetOptions = {"range": (start, end)}
        if if_match:
            options["if_match"] = if_match
        if not _RUNTIME:
            _RUNTIME.append(os.getpid())
        try:
            result = obstore.get(store, key, options=options)
            got_start, got_end = result.range
            # The first chunk of at least one byte more than asked: a body longer than the range is seen (and
            # refused by check_range_answer) having read at most that much.
            body = next(iter(result.stream(min_chunk_size=end - start + 1)), b"")
            meta = result.meta
        except PreconditionError:
            return Answer(412, None, None, b"")
        except FileNotFoundError as exc:
            raise FileNotFoundError(redact_url(path)) from exc
        except obstore.exceptions.BaseError as exc:
            found = _STATUS.search(str(exc))
            status = None if found is None else int(found.group(1))
            if status in _THROTTLES:
                self._throttled_until[where] = time.monotonic() + THROTTLE_BYPASS_S
            _raise_judged(exc, status, path)
            return None
        return Answer(206, f"bytes {got_start}-{got_end - 1}/{meta['size']}", meta["e_tag"], body)


def _raise_judged(exc: BaseException, status: int | None, path: str) -> None:
    """An error status (the HTTP status obstore's message names, None: none) or a failed transfer raised as
    retry.py classifies it; any other complaint returns."""
    text = f"{redact_url(path)}: {redact_url(str(exc).split(chr(10), 1)[0])}"
    if status is not None and status != 416:
        raise StatusError(status, text) from exc
    if status is None and any(word in str(exc) for word in _TIMEOUT):
        raise TimeoutError(text) from exc
    if status is None and any(word in str(exc) for word in _TRANSPORT):
        raise ConnectionError(text) from exc
