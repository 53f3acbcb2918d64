import random
import time

import pytest

from robostream.storage.retry import RemoteReadError, RetryPolicy, call_with_retries, is_throttle, is_transient


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


class _Status(Exception):
    def __init__(self, status):
        super().__init__(f"status {status}")
        self.status = status


def test_throttles_are_told_apart_from_other_transient_failures():
    """429 and 503 (S3's SlowDown, which s3fs turns into OSError EBUSY) ask for fewer requests; a 500 or a reset
    is only retried. Each retry reaches on_retry before its backoff."""
    import errno

    slow_down = OSError(errno.EBUSY, "SlowDown: Please reduce your request rate.")
    assert is_throttle(_Status(503)) and is_throttle(_Status(429)) and is_throttle(slow_down)
    wrapped = OSError("s3fs")
    wrapped.__cause__ = _Status(503)
    assert is_throttle(wrapped)
    assert not is_throttle(_Status(500)) and not is_throttle(ConnectionResetError())
    seen = []
    answers = iter([_Status(503), _Status(500)])

    def read():
        error = next(answers, None)
        if error is not None:
            raise error
        return "ok"

    assert call_with_retries(read, "u", RetryPolicy(), sleep=lambda s: None, on_retry=seen.append) == "ok"
    assert [e.status for e in seen] == [503, 500]


def test_a_throttle_halves_the_requests_in_flight_and_answers_restore_them():
    """Multiplicative decrease on each throttle, one more allowed per round of that many answered requests."""
    from robostream.storage.blocks import BlockCache
    from robostream.storage.read_ahead import ReadAhead

    class Bytes:  # an in-memory file: the read-ahead's answers without a server
        key, block_size = "mem", 1024

        def size(self):
            return 1 << 20

        def fetch_range(self, start, end):
            return bytes(end - start)

    ahead = ReadAhead(BlockCache(64 << 20), max_in_flight=16, request_bytes=1024)
    ahead.throttled()
    ahead.throttled()
    assert (ahead.allowed, ahead.allowed_low) == (4, 4)
    ahead.fetch(Bytes(), 0, 1 << 20, need="soon")  # 1,024 one-block requests
    deadline = time.monotonic() + 30
    while ahead.requests < 1024 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ahead.requests == 1024 and ahead.allowed == 16 and ahead.allowed_low == 4


def test_a_queued_range_a_reader_overtook_is_still_one_request():
    """A decoder that reaches a block of a range still queued fetches that block itself; the range's request then
    still covers the whole span (one GET, not one per side of that block), and fills only its own blocks."""
    from robostream.storage.blocks import BlockCache
    from robostream.storage.read_ahead import ReadAhead

    class Bytes:  # an in-memory file that records the ranges asked of it
        key, block_size = "mem", 1024

        def __init__(self):
            self.asked = []

        def size(self):
            return 16 * 1024

        def fetch_range(self, start, end):
            self.asked.append((start, end))
            return bytes(range(256)) * ((end - start) // 256)

    blocks = BlockCache(64 << 20)
    source = Bytes()
    overtaken = [("mem", 3), ("mem", 9)]
    assert blocks.claim(overtaken) == overtaken  # two readers fetching their own blocks
    ahead = ReadAhead(blocks, max_in_flight=4, request_bytes=16 * 1024)
    ahead.fetch(source, 0, 16 * 1024, need="later")
    deadline = time.monotonic() + 30
    while ahead.requests < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.asked == [(0, 16 * 1024)]
    for key in overtaken:  # the readers' own fetches fill their blocks: the range left them alone
        blocks.fulfil(key, b"R" * 1024, ahead=False)
    for i in range(16):
        mine = blocks.get(("mem", i), fetch=lambda: pytest.fail("every block was fetched already"))
        assert mine == (b"R" * 1024 if ("mem", i) in overtaken else bytes(range(256)) * 4)
