"""Tests of the test infrastructure itself: RangeHTTPServer, S3Server (moto) and FaultProxy.

The fault tests also pin down how the real clients react to each fault (exception types, internal resends),
which is what robostream's retry layer has to handle:

=============  =======================================  ===============================================
fault          fsspec HTTPFileSystem.cat_file           s3fs cat_file (s3fs and botocore retries off)
=============  =======================================  ===============================================
drop_mid_body  aiohttp.ClientPayloadError               aiohttp.ClientPayloadError
status 503     aiohttp.ClientResponseError(.status)     OSError (errno EBUSY, from ClientError SlowDown)
stall          fsspec FSTimeoutError (a TimeoutError)   botocore ReadTimeoutError (before headers),
                                                        FSTimeoutError (mid-body)
reset          resent once by aiohttp, then             resent once by aiohttp, then
               aiohttp.ClientOSError                    botocore EndpointConnectionError
=============  =======================================  ===============================================
"""

from __future__ import annotations

import errno
import hashlib
import socket
import threading
import time
from pathlib import Path

import aiohttp
import botocore.exceptions
import fsspec.exceptions
import pytest
import requests

from robostream.testing.slow_store import RangeHTTPServer, RangeNotSatisfiable, parse_byte_range

from .servers import (
    DATA_FILES,
    FaultProxy,
    MakeFaultProxy,
    S3Server,
    corrupt,
    drop_mid_body,
    http_filesystem,
    http_status,
    reset,
    s3_filesystem,
    stall,
)

pytestmark = pytest.mark.timeout(60)

BLOB = "blob.bin"
RANGES = [(0, 1), (0, 100), (100, 4096), (65_530, 140_000), (199_999, 200_000), (150_000, 200_000)]


def blob(remote_data_dir: Path) -> bytes:
    return (remote_data_dir / BLOB).read_bytes()


# ---------------------------------------------------------------------------------------------------------------
# RangeHTTPServer
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, size, expected",
    [
        (None, 10, None),
        ("bytes=0-0", 10, range(0, 1)),
        ("bytes=2-5", 10, range(2, 6)),
        ("bytes=2-", 10, range(2, 10)),
        ("bytes=-3", 10, range(7, 10)),
        ("bytes=-30", 10, range(0, 10)),
        ("bytes=5-99", 10, range(5, 10)),
        ("bytes=5-2", 10, None),
        ("bytes=0-1,4-5", 10, None),
        ("items=0-1", 10, None),
        ("bytes=x-1", 10, None),
    ],
)
def test_parse_byte_range(header: str | None, size: int, expected: range | None) -> None:
    assert parse_byte_range(header, size) == expected


@pytest.mark.parametrize("header, size", [("bytes=10-", 10), ("bytes=10-20", 10), ("bytes=-0", 10), ("bytes=-1", 0)])
def test_parse_byte_range_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_byte_range(header, size)


def test_http_range_requests(http_server: RangeHTTPServer, remote_data_dir: Path) -> None:
    data, url = blob(remote_data_dir), http_server.url_for(BLOB)
    with requests.Session() as s:
        for header, first, last in [
            ("bytes=0-0", 0, 0),
            ("bytes=10-4105", 10, 4105),
            ("bytes=199000-", 199_000, 199_999),
            ("bytes=-500", 199_500, 199_999),
            ("bytes=199990-999999", 199_990, 199_999),
        ]:
            r = s.get(url, headers={"Range": header}, timeout=5)
            assert r.status_code == 206, header
            assert r.headers["Content-Range"] == f"bytes {first}-{last}/{len(data)}"
            assert int(r.headers["Content-Length"]) == last - first + 1
            assert r.content == data[first : last + 1]
        whole = s.get(url, timeout=5)
        assert (whole.status_code, whole.content, whole.headers["Accept-Ranges"]) == (200, data, "bytes")


def test_http_head_416_404_and_empty_file(http_server: RangeHTTPServer) -> None:
    with requests.Session() as s:
        head = s.head(http_server.url_for(BLOB), timeout=5)
        assert (head.status_code, head.headers["Content-Length"], head.content) == (200, str(DATA_FILES[BLOB]), b"")
        bad = s.get(http_server.url_for(BLOB), headers={"Range": f"bytes={DATA_FILES[BLOB]}-"}, timeout=5)
        assert (bad.status_code, bad.headers["Content-Range"]) == (416, f"bytes */{DATA_FILES[BLOB]}")
        assert s.get(http_server.url_for("missing.bin"), timeout=5).status_code == 404
        assert s.get(http_server.url_for("nested"), timeout=5).status_code == 404  # directories are not listed
        assert s.get(f"{http_server.url}/../../etc/passwd", timeout=5).status_code == 404
        empty = s.get(http_server.url_for("empty.bin"), timeout=5)
        assert (empty.status_code, empty.content) == (200, b"")
        assert s.get(http_server.url_for("empty.bin"), headers={"Range": "bytes=0-"}, timeout=5).status_code == 416


def test_http_etag_and_if_match(http_server: RangeHTTPServer, remote_data_dir: Path) -> None:
    url, data = http_server.url_for(BLOB), blob(remote_data_dir)
    with requests.Session() as s:
        etag = s.head(url, timeout=5).headers["ETag"]
        assert etag == f'"{hashlib.md5(data).hexdigest()}"'
        ranged = s.get(url, headers={"Range": "bytes=0-9", "If-Match": etag}, timeout=5)
        assert (ranged.status_code, ranged.content, ranged.headers["ETag"]) == (206, data[:10], etag)
        for header in (f'"other", {etag}', "*"):
            assert s.get(url, headers={"Range": "bytes=0-9", "If-Match": header}, timeout=5).status_code == 206
        for header in ('"other"', f"W/{etag}"):  # a weak ETag never matches under If-Match
            refused = s.get(url, headers={"Range": "bytes=0-9", "If-Match": header}, timeout=5)
            assert (refused.status_code, refused.headers["ETag"]) == (412, etag)


def test_http_without_etags(remote_data_dir: Path) -> None:
    with RangeHTTPServer(remote_data_dir, etag=False) as server, requests.Session() as s:
        url = server.url_for(BLOB)
        assert "ETag" not in s.head(url, timeout=5).headers
        assert s.get(url, headers={"Range": "bytes=0-9", "If-Match": "*"}, timeout=5).status_code == 206
        assert s.get(url, headers={"Range": "bytes=0-9", "If-Match": '"x"'}, timeout=5).status_code == 412


def test_http_counters(http_server: RangeHTTPServer) -> None:
    with requests.Session() as s:
        s.get(http_server.url_for(BLOB), headers={"Range": "bytes=0-99"}, timeout=5)
        s.get(http_server.url_for(BLOB), headers={"Range": "bytes=-10"}, timeout=5)
        s.head(http_server.url_for(BLOB), timeout=5)
        s.get(http_server.url_for("with space/a b.bin"), timeout=5)
        s.get(http_server.url_for("missing.bin"), timeout=5)
    assert http_server.stats() == {
        "/blob.bin": {"requests": 3, "bytes": 110},
        "/with space/a b.bin": {"requests": 1, "bytes": DATA_FILES["with space/a b.bin"]},
        "/missing.bin": {"requests": 1, "bytes": 0},
    }
    http_server.reset_stats()
    assert http_server.stats() == {}


def test_fsspec_http_cat_file_ranges(http_server: RangeHTTPServer, remote_data_dir: Path) -> None:
    fs = http_filesystem(timeout=10)
    data, url = blob(remote_data_dir), http_server.url_for(BLOB)
    for start, end in RANGES:
        assert fs.cat_file(url, start, end) == data[start:end]
    assert fs.size(url) == len(data)
    nested = "nested/dir/chunk-000.bin"
    assert fs.cat_file(http_server.url_for(nested), 5, 50) == (remote_data_dir / nested).read_bytes()[5:50]
    assert http_server.stats()["/blob.bin"]["bytes"] == sum(end - start for start, end in RANGES)


def test_server_stop_is_clean(remote_data_dir: Path) -> None:
    before = set(threading.enumerate())
    with RangeHTTPServer(remote_data_dir) as server:
        port = server.port
        idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # an idle keep-alive connection
        assert requests.get(server.url_for("small.txt"), timeout=5).status_code == 200
    leftover = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert leftover == []
    assert idle.recv(1) == b""  # the server closed it
    idle.close()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/small.txt", timeout=2)


# ---------------------------------------------------------------------------------------------------------------
# S3Server
# ---------------------------------------------------------------------------------------------------------------


def test_s3_round_trip_range_reads(s3_server: S3Server, s3_bucket: str, remote_data_dir: Path) -> None:
    fs = s3_filesystem(s3_server.storage_options())
    data = blob(remote_data_dir)
    # s3fs.cat_file's second positional parameter is version_id: pass start/end by keyword.
    for start, end in RANGES:
        assert fs.cat_file(f"{s3_bucket}/{BLOB}", start=start, end=end) == data[start:end]
    assert fs.size(f"{s3_bucket}/{BLOB}") == len(data)
    assert sorted(fs.find(s3_bucket)) == sorted(f"{s3_bucket}/{name}" for name in DATA_FILES)
    spaced = "with space/a b.bin"
    assert fs.cat_file(f"{s3_bucket}/{spaced}") == (remote_data_dir / spaced).read_bytes()
    fs.pipe_file(f"{s3_bucket}/written/x.bin", b"hello world")
    assert fs.cat_file(f"{s3_bucket}/written/x.bin", start=6, end=11) == b"world"


def test_s3_through_transparent_proxy(
    s3_server: S3Server, s3_bucket: str, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(s3_server.endpoint_url)
    fs = s3_filesystem(s3_server.storage_options(proxy.url))
    assert fs.cat_file(f"{s3_bucket}/{BLOB}", start=1000, end=9000) == blob(remote_data_dir)[1000:9000]
    fs.pipe_file(f"{s3_bucket}/via-proxy.bin", b"x" * 100_000)  # PUT bodies are forwarded
    direct = s3_filesystem(s3_server.storage_options())
    assert direct.cat_file(f"{s3_bucket}/via-proxy.bin") == b"x" * 100_000
    assert proxy.stats()["forwarded"] == proxy.stats()["requests"] >= 2


# ---------------------------------------------------------------------------------------------------------------
# FaultProxy with requests
# ---------------------------------------------------------------------------------------------------------------


def test_proxy_transparent_range_and_head(
    http_server: RangeHTTPServer, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(http_server.url)
    with requests.Session() as s:
        r = s.get(f"{proxy.url}/{BLOB}", headers={"Range": "bytes=100-199"}, timeout=5)
        assert (r.status_code, r.headers["Content-Range"], r.content) == (
            206,
            "bytes 100-199/200000",
            blob(remote_data_dir)[100:200],
        )
        assert s.head(f"{proxy.url}/{BLOB}", timeout=5).headers["Content-Length"] == "200000"
        assert s.get(f"{proxy.url}/{BLOB}", headers={"Range": "bytes=300000-"}, timeout=5).status_code == 416
    assert proxy.stats() == {"requests": 3, "matched": 3, "forwarded": 3, "faults": 0, "by_kind": {}}
    assert http_server.stats()["/blob.bin"] == {"requests": 3, "bytes": 100}


def test_proxy_status_with_retry_after(http_server: RangeHTTPServer, make_fault_proxy: MakeFaultProxy) -> None:
    proxy = make_fault_proxy(http_server.url, [http_status(503, retry_after=2), http_status(429)])
    with requests.Session() as s:
        first = s.get(f"{proxy.url}/{BLOB}", timeout=5)
        second = s.get(f"{proxy.url}/{BLOB}", timeout=5)
        third = s.get(f"{proxy.url}/{BLOB}", timeout=5)
    assert (first.status_code, first.headers["Retry-After"]) == (503, "2")
    assert b"<Code>SlowDown</Code>" in first.content
    assert (second.status_code, third.status_code) == (429, 200)
    assert proxy.stats()["by_kind"] == {"status": 2}
    assert http_server.stats()["/blob.bin"]["requests"] == 1  # status faults never reach the upstream


def test_proxy_drop_mid_body(
    http_server: RangeHTTPServer, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(http_server.url, [drop_mid_body(), drop_mid_body(nbytes=10)])
    with pytest.raises(requests.exceptions.ChunkedEncodingError):  # urllib3 IncompleteRead underneath
        requests.get(f"{proxy.url}/{BLOB}", timeout=5)
    streamed = requests.get(f"{proxy.url}/{BLOB}", timeout=5, stream=True)
    assert streamed.status_code == 200 and streamed.headers["Content-Length"] == "200000"
    assert streamed.raw.read(100, decode_content=False) == blob(remote_data_dir)[:10]  # short body, then EOF
    assert requests.get(f"{proxy.url}/{BLOB}", timeout=5).content == blob(remote_data_dir)


def test_proxy_corrupt_flips_one_byte_and_keeps_the_headers(
    http_server: RangeHTTPServer, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    data = blob(remote_data_dir)
    proxy = make_fault_proxy(http_server.url, [corrupt(), corrupt(offset=3)])
    direct = requests.get(http_server.url_for(BLOB), headers={"Range": "bytes=0-999"}, timeout=5)
    for at in (500, 3):
        bad = requests.get(f"{proxy.url}/{BLOB}", headers={"Range": "bytes=0-999"}, timeout=5)
        assert bad.status_code == 206 and bad.headers["ETag"] == direct.headers["ETag"]
        assert bad.headers["Content-Range"] == direct.headers["Content-Range"]
        assert [i for i in range(1000) if bad.content[i] != data[i]] == [at]
    assert requests.get(f"{proxy.url}/{BLOB}", timeout=5).content == data  # plan exhausted: forwarded
    assert proxy.stats()["by_kind"] == {"corrupt": 2}


def test_proxy_stall_times_out_and_stop_interrupts_it(
    http_server: RangeHTTPServer, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = FaultProxy.first_k(http_server.url, 1, stall(seconds=30)).start()
    try:
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get(f"{proxy.url}/{BLOB}", timeout=0.5)
        assert requests.get(f"{proxy.url}/{BLOB}", timeout=5).status_code == 200
    finally:
        started = time.monotonic()
        proxy.stop()  # the stalled handler is still waiting: stop() must wake it
    assert time.monotonic() - started < 3


def test_proxy_stall_mid_body(http_server: RangeHTTPServer, make_fault_proxy: MakeFaultProxy) -> None:
    proxy = make_fault_proxy(http_server.url, [stall(seconds=30, after_bytes=1000)])
    with pytest.raises(requests.exceptions.ConnectionError):  # ReadTimeoutError while reading the body
        requests.get(f"{proxy.url}/{BLOB}", timeout=0.5)


def test_proxy_reset(http_server: RangeHTTPServer, make_fault_proxy: MakeFaultProxy) -> None:
    proxy = make_fault_proxy(http_server.url, [reset()])
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{proxy.url}/{BLOB}", timeout=5)
    assert requests.get(f"{proxy.url}/{BLOB}", timeout=5).status_code == 200
    assert proxy.stats()["by_kind"] == {"reset": 1}


def test_proxy_constructors_match_and_clear(http_server: RangeHTTPServer) -> None:
    url = http_server.url
    with FaultProxy.every_nth(url, 3, http_status(500)) as proxy, requests.Session() as s:
        assert [s.get(f"{proxy.url}/small.txt", timeout=5).status_code for _ in range(6)] == [200, 200, 500] * 2
    with FaultProxy.always(url, http_status(503), match=lambda method, path: method == "GET") as proxy:
        assert requests.head(f"{proxy.url}/small.txt", timeout=5).status_code == 200
        assert requests.get(f"{proxy.url}/small.txt", timeout=5).status_code == 503
        assert proxy.stats() == {"requests": 2, "matched": 1, "forwarded": 1, "faults": 1, "by_kind": {"status": 1}}
        proxy.clear_faults()
        assert requests.get(f"{proxy.url}/small.txt", timeout=5).status_code == 200
        assert [(e.number, e.method, e.fault) for e in proxy.events()] == [
            (0, "HEAD", None),
            (1, "GET", "status"),
            (2, "GET", None),
        ]
    with FaultProxy(url, lambda n, method, path: http_status(404) if path.endswith(".txt") else None) as proxy:
        assert requests.get(f"{proxy.url}/small.txt", timeout=5).status_code == 404
        assert requests.get(f"{proxy.url}/{BLOB}", timeout=5).status_code == 200


# ---------------------------------------------------------------------------------------------------------------
# How fsspec's HTTP filesystem and s3fs react to each fault (documents what the retry layer must handle)
# ---------------------------------------------------------------------------------------------------------------


def test_fsspec_http_fault_exceptions(
    http_server: RangeHTTPServer, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(http_server.url)
    # The short timeout only where a stall must trip it; every other request may take what a loaded machine needs.
    fs, impatient = http_filesystem(timeout=60), http_filesystem(timeout=0.5)
    url, expected = f"{proxy.url}/{BLOB}", blob(remote_data_dir)[10:5000]

    proxy.set_plan([drop_mid_body()])
    with pytest.raises(aiohttp.ClientPayloadError):
        fs.cat_file(url, 10, 5000)

    proxy.set_plan([http_status(503)])
    with pytest.raises(aiohttp.ClientResponseError) as info:
        fs.cat_file(url, 10, 5000)
    assert info.value.status == 503

    proxy.set_plan([stall(seconds=30)])
    with pytest.raises(fsspec.exceptions.FSTimeoutError):
        impatient.cat_file(url, 10, 5000)
    assert issubclass(fsspec.exceptions.FSTimeoutError, TimeoutError)

    proxy.set_plan([stall(seconds=30, after_bytes=100)])
    with pytest.raises(fsspec.exceptions.FSTimeoutError):
        impatient.cat_file(url, 10, 5000)

    # aiohttp resends an idempotent request once when the connection dies before a response: one reset is hidden.
    proxy.set_plan([reset()])
    proxy.reset_stats()
    assert fs.cat_file(url, 10, 5000) == expected
    assert proxy.stats()["requests"] == 2
    proxy.set_plan([reset(), reset()])
    with pytest.raises(aiohttp.ClientOSError):
        fs.cat_file(url, 10, 5000)

    proxy.clear_faults()
    assert fs.cat_file(url, 10, 5000) == expected


def test_s3fs_fault_exceptions_without_retries(
    s3_server: S3Server, s3_bucket: str, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(s3_server.endpoint_url)
    # The short read timeout only where a stall must trip it; other requests may take what a loaded machine needs.
    fs, impatient = (
        s3_filesystem(
            s3_server.storage_options(proxy.url, total_max_attempts=1, read_timeout=timeout, connect_timeout=timeout),
            s3fs_retries=1,
        )
        for timeout in (60, 0.5)
    )
    path, expected = f"{s3_bucket}/{BLOB}", blob(remote_data_dir)[10:5000]

    def attempt(*faults: object, reader: object = fs) -> pytest.ExceptionInfo[BaseException]:
        proxy.set_plan(list(faults))
        proxy.reset_stats()
        with pytest.raises(Exception) as info:
            reader.cat_file(path, start=10, end=5000)
        return info

    assert attempt(drop_mid_body()).type is aiohttp.ClientPayloadError
    assert proxy.stats()["requests"] == 1

    info = attempt(http_status(503))  # s3fs translates ClientError(SlowDown) into OSError(EBUSY)
    assert info.type is OSError and info.value.errno == errno.EBUSY
    assert isinstance(info.value.__cause__, botocore.exceptions.ClientError)
    assert proxy.stats()["requests"] == 1

    assert attempt(stall(seconds=30), reader=impatient).type is botocore.exceptions.ReadTimeoutError
    assert attempt(stall(seconds=30, after_bytes=100), reader=impatient).type is fsspec.exceptions.FSTimeoutError

    assert attempt(reset(), reset()).type is botocore.exceptions.EndpointConnectionError
    assert proxy.stats()["requests"] == 2  # aiohttp's own single resend

    proxy.clear_faults()
    assert fs.cat_file(path, start=10, end=5000) == expected


def test_s3fs_botocore_retries_hide_a_transient_503(
    s3_server: S3Server, s3_bucket: str, remote_data_dir: Path, make_fault_proxy: MakeFaultProxy
) -> None:
    proxy = make_fault_proxy(s3_server.endpoint_url, [http_status(503)])
    fs = s3_filesystem(s3_server.storage_options(proxy.url, total_max_attempts=2), s3fs_retries=1)
    assert fs.cat_file(f"{s3_bucket}/{BLOB}", start=0, end=10) == blob(remote_data_dir)[:10]
    assert proxy.stats()["requests"] == 2
