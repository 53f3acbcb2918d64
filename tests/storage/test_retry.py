import random

import pytest

from robostream.storage.retry import RemoteReadError, RetryPolicy, call_with_retries, is_transient


class Status(Exception):
    def __init__(self, status, headers=None):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers or {}


def _flaky(failures):
    calls = []

    def read():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return b"ok"

    return read, calls


def test_transient_failures_are_retried_with_growing_delays():
    read, calls = _flaky([ConnectionResetError("reset"), TimeoutError("slow"), Status(503)])
    delays = []
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=1.0)
    assert call_with_retries(read, "http://x/f bytes 0-9", policy, random.Random(0), delays.append) == b"ok"
    assert len(calls) == 4 and len(delays) == 3
    assert all(0 <= d <= 0.1 * 2**i for i, d in enumerate(delays))


def test_retry_after_is_honoured():
    read, _ = _flaky([Status(429, {"Retry-After": "2"})])
    delays = []
    call_with_retries(read, "u", RetryPolicy(), random.Random(0), delays.append)
    assert delays == [2.0]


def test_the_bound_gives_a_clear_error_naming_url_range_and_attempts():
    read, calls = _flaky([Status(503)] * 10)
    with pytest.raises(RemoteReadError, match=r"http://x/f bytes 0-9: still failing after 3 attempts.*Status"):
        call_with_retries(read, "http://x/f bytes 0-9", RetryPolicy(max_attempts=3), random.Random(0), lambda s: None)
    assert len(calls) == 3


@pytest.mark.parametrize("exc", [Status(404), Status(403), PermissionError("denied"), FileNotFoundError("gone")])
def test_permanent_failures_fail_at_once(exc):
    read, calls = _flaky([exc])
    with pytest.raises((RemoteReadError, FileNotFoundError)):
        call_with_retries(read, "u", RetryPolicy(), random.Random(0), lambda s: None)
    assert len(calls) == 1
    assert not is_transient(exc)
