"""Retries with exponential backoff and jitter for remote reads.

Transient failures (connection resets, timeouts, HTTP 5xx, 408 and 429 with Retry-After) are retried up to a
bound; a throttle (429, 503: S3's SlowDown) is also reported to the caller (`on_retry`), whose read-ahead then
halves its requests in flight (storage/read_ahead.py), as object stores ask of a client over their request rate; anything else (404, 403, a malformed request) fails at once, and an IntegrityError (a changed file, a
checksum mismatch) passes through unchanged. After the bound, the error names what was being read, how many
attempts were made and what the last one met (a timeout: which deadline passed): never a hang, never a silently
short read. Messages never hold a user or password written in a URL (storage/redact.py).
"""

from __future__ import annotations

import asyncio
import errno
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from robostream.errors import IntegrityError, RobostreamError
from robostream.storage.redact import redact_url

T = TypeVar("T")
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)


class RemoteReadError(RobostreamError, OSError):
    """A remote read kept failing after every retry, or failed in a way retrying cannot fix."""


@dataclass(frozen=True)
class RetryPolicy:
    """max_attempts: tries per request (first included); delays grow base_delay_s * 2**k up to max_delay_s, with
    full jitter; timeout_s bounds each request (applied by the storage layer to the client)."""

    max_attempts: int = 6
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    timeout_s: float = 30.0

    def delay(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        backoff = rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        return max(backoff, min(retry_after_s or 0.0, self.max_delay_s * 4))


def http_status(exc: BaseException) -> int | None:
    """The HTTP status carried by an aiohttp, requests or botocore error, if any."""
    for attr in ("status", "status_code", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status else None
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    return int(status) if isinstance(status, int) else None


def retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    try:
        value = headers.get("Retry-After") if hasattr(headers, "get") else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def is_transient(exc: BaseException) -> bool:
    status = http_status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    if isinstance(exc, PERMANENT):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError, EOFError, OSError)):
        return True
    name = type(exc).__name__
    # "Checksum": botocore's check of a whole-object answer against the checksum S3 stored (a corrupted transfer)
    return any(
        word in name
        for word in (
            "Timeout",
            "Connection",
            "Disconnected",
            "Payload",
            "IncompleteRead",
            "ChunkedEncoding",
            "ProtocolError",
            "EndpointConnection",
            "Checksum",
        )
    )


def is_throttle(exc: BaseException) -> bool:
    """The store asks for fewer requests: HTTP 429 or 503 (S3's SlowDown), on the error or its cause (s3fs turns
    botocore's SlowDown into an OSError with errno EBUSY)."""
    for error in (exc, exc.__cause__):
        if error is not None and (
            http_status(error) in (429, 503) or (isinstance(error, OSError) and error.errno == errno.EBUSY)
        ):
            return True
    return False


def is_timeout(exc: BaseException) -> bool:
    """A deadline passed: asyncio's, aiohttp's and fsspec's timeouts (whose text is empty), botocore's."""
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or "Timeout" in type(exc).__name__


def describe_error(exc: BaseException, policy: RetryPolicy) -> str:
    """An error for a final message: its type and text, URLs redacted; a timeout says which deadline passed (its
    own text is often empty)."""
    text = redact_url(str(exc))
    if is_timeout(exc):
        return f"{type(exc).__name__}: timed out (RetryPolicy.timeout_s={policy.timeout_s} s per request)" + (
            f" ({text})" if text else ""
        )
    return f"{type(exc).__name__}: {text}"


def call_with_retries(
    read: Callable[[], T],
    what: str,
    policy: RetryPolicy,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Run `read`, retrying transient failures (each one, before its backoff, handed to `on_retry`: counted by the
    storage); `what` names the URL and byte range for the final error (redacted there: the success path does no work
    for it)."""
    for attempt in range(policy.max_attempts):
        try:
            return read()
        except IntegrityError:
            raise  # already names the file and what to do; retrying is the storage layer's decision
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised with context
            _raise_unless_retried(exc, attempt, what, policy)
            if on_retry is not None:
                on_retry(exc)
            rng = rng or random.Random()  # made on the first retry: seeding one per request cost ~2% of its CPU
            sleep(policy.delay(attempt, retry_after(exc), rng))
    raise AssertionError("unreachable")


async def call_with_retries_async(
    read: Callable[[], Awaitable[T]],
    what: str,
    policy: RetryPolicy,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """`call_with_retries` for a coroutine, in the event loop (the backoff an asyncio sleep): requests asked
    together in one loop call (Storage.probe) each retry on their own, without a thread each."""
    rng = None
    for attempt in range(policy.max_attempts):
        try:
            return await read()
        except IntegrityError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised with context
            _raise_unless_retried(exc, attempt, what, policy)
            if on_retry is not None:
                on_retry(exc)
            rng = rng or random.Random()
            await asyncio.sleep(policy.delay(attempt, retry_after(exc), rng))
    raise AssertionError("unreachable")


def _raise_unless_retried(exc: Exception, attempt: int, what: str, policy: RetryPolicy) -> None:
    """The final error for a failed attempt, raised from it: not transient (not found: a FileNotFoundError), or
    the last attempt; returns when the attempt is to be retried."""
    if not is_transient(exc):
        if isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(f"{redact_url(what)}: not found ({redact_url(str(exc))})") from exc
        raise RemoteReadError(
            f"{redact_url(what)}: failed and is not retryable: {describe_error(exc, policy)}"
        ) from exc
    if attempt + 1 == policy.max_attempts:
        remedy = (
            "RetryPolicy.timeout_s (a slow link or a large answer)" if is_timeout(exc) else "RetryPolicy.max_attempts"
        )
        raise RemoteReadError(
            f"{redact_url(what)}: still failing after {policy.max_attempts} attempts (last error "
            f"{describe_error(exc, policy)}); check the server or raise {remedy}"
        ) from exc
