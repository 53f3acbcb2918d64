"""Point huggingface_hub at the loopback Hub emulator (robostream/testing/hub_store.py) for a test, and refuse any
connection that is not 127.0.0.1 while it lasts."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from robostream.testing.hub_store import HubServer, hub_environment

__all__ = ["HubServer", "huggingface_hub_at"]


def _is_loopback(host: object) -> bool:
    if host in ("localhost", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@contextmanager
def huggingface_hub_at(endpoint: str, home: Path) -> Iterator[None]:
    """Point huggingface_hub (in this process) at `endpoint` (`hub_environment`), and refuse any connection (or
    name lookup) that is not 127.0.0.1 while it lasts."""
    import pytest

    with pytest.MonkeyPatch.context() as mp, hub_environment(endpoint, home):
        connect, connect_ex, getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

        def _check(sock: socket.socket, address: Any) -> None:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
                raise ConnectionRefusedError(f"test guard: connection to {address} refused (only 127.0.0.1)")

        def guarded_connect(sock: socket.socket, address: Any) -> None:
            _check(sock, address)
            return connect(sock, address)

        def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
            _check(sock, address)
            return connect_ex(sock, address)

        def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not _is_loopback(host.decode() if isinstance(host, bytes) else host):
                raise socket.gaierror(f"test guard: lookup of {host!r} refused (only 127.0.0.1)")
            return getaddrinfo(host, *args, **kwargs)

        mp.setattr(socket.socket, "connect", guarded_connect)
        mp.setattr(socket.socket, "connect_ex", guarded_connect_ex)
        mp.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
        yield
