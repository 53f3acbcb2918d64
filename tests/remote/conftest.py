"""Fixtures for remote-source tests: local HTTP/S3 servers and fault-injecting proxies on 127.0.0.1.

Servers are package-scoped (started once for tests/remote, stopped at its end); the function-scoped wrappers
reset counters so each test sees its own stats. ``make_fault_proxy`` starts proxies that are stopped after the
test. The environment gets fake AWS credentials and no proxies for the duration of the package, so nothing can
pick up real credentials or leave 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from .servers import (
    Fault,
    FaultPlan,
    FaultProxy,
    MakeFaultProxy,
    RangeHTTPServer,
    RequestMatcher,
    S3Server,
    make_data_dir,
)

S3_BUCKET = "robostream-test"


@pytest.fixture(scope="package", autouse=True)
def _isolated_network_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fake AWS credentials, no config/credential files, no IMDS, no HTTP proxies -- for all of tests/remote."""
    missing = tmp_path_factory.mktemp("aws") / "missing"
    with pytest.MonkeyPatch.context() as mp:
        for name in (
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_SECURITY_TOKEN",
            "AWS_ROLE_ARN",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", S3Server.KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", S3Server.SECRET)
        mp.setenv("AWS_DEFAULT_REGION", S3Server.REGION)
        mp.setenv("AWS_CONFIG_FILE", str(missing))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(missing))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        yield


@pytest.fixture(scope="package")
def remote_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every fixture server serves (see ``DATA_FILES``)."""
    return make_data_dir(tmp_path_factory.mktemp("remote_data"))


@pytest.fixture(scope="package")
def _http_server_pkg(remote_data_dir: Path) -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer(remote_data_dir) as server:
        yield server


@pytest.fixture
def http_server(_http_server_pkg: RangeHTTPServer) -> RangeHTTPServer:
    """The package's RangeHTTPServer over ``remote_data_dir``, with its stats reset for this test."""
    _http_server_pkg.reset_stats()
    return _http_server_pkg


@pytest.fixture(scope="package")
def s3_server() -> Iterator[S3Server]:
    """moto S3 on 127.0.0.1 for the package (state is process-wide in moto)."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="package")
def s3_bucket(s3_server: S3Server, remote_data_dir: Path) -> str:
    """A bucket holding ``remote_data_dir`` (same relative keys); returns the bucket name."""
    s3_server.upload_dir(S3_BUCKET, remote_data_dir)
    return S3_BUCKET


@pytest.fixture
def make_fault_proxy() -> Iterator[MakeFaultProxy]:
    """Factory: ``make_fault_proxy(upstream_url, plan=None, match=None)`` -> a started FaultProxy, stopped after
    the test. ``plan`` may be a callable, a sequence of ``Fault | None``, or ``None``."""
    proxies: list[FaultProxy] = []

    def make(
        upstream: str, plan: FaultPlan | Iterable[Fault | None] | None = None, *, match: RequestMatcher | None = None
    ) -> FaultProxy:
        proxy = FaultProxy(upstream, plan, match=match).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()
