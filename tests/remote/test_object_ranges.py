"""Ranged reads through obstore (storage/object_ranges.py) in a DataLoader worker, the only kind of process that
uses it: the same integrity rules as the aiohttp and s3fs paths (a changed file, a wrong 206 span, a missing file),
throttles and resets retried and counted by RetryPolicy, S3 through moto. Every case runs in one worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader, Dataset

from robostream import ReadOptions
from robostream.errors import FileChangedError
from robostream.storage.integrity import FileVersion
from robostream.storage.retry import RetryPolicy
from robostream.storage.store import RangedReader, Storage
from robostream.testing.slow_store import RangeHTTPServer
from tests.remote.servers import FaultProxy, http_status, reset
from tests.remote.test_hostile_servers import RecordingServer, RedirectServer, ShiftedRangeServer

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02, timeout_s=5)
pytestmark = pytest.mark.timeout(120)


def _read(root: str, options: dict[str, Any], name: str, start: int, end: int) -> tuple[bytes, Storage]:
    storage = Storage(root, ReadOptions(retry=FAST_RETRY, storage_options=options))
    reader = RangedReader(storage, f"{storage.root}/{name}", name, storage.stat(name))
    return reader.fetch_range(start, end), storage


def _outcome(case: dict[str, Any]) -> dict[str, Any]:
    """Run one case; what it read or raised, and the storage's counts."""
    try:
        if case.get("replace"):  # read once, replace the file (same size, other bytes), read again
            storage = Storage(case["root"], ReadOptions(retry=FAST_RETRY, storage_options=case["options"]))
            name = case["name"]
            reader = RangedReader(storage, f"{storage.root}/{name}", name, storage.stat(name))
            reader.fetch_range(0, 10)
            Path(case["replace"]).write_bytes(b"z" * case["size"])
            reader.fetch_range(10, 20)
        elif case.get("missing"):
            storage = Storage(case["root"], ReadOptions(retry=FAST_RETRY))
            RangedReader(storage, f"{storage.root}/gone.bin", "gone.bin", FileVersion(100, None)).fetch_range(0, 10)
        data, storage = _read(case["root"], case["options"], case["name"], case["start"], case["end"])
    except (FileChangedError, FileNotFoundError, OSError, ValueError) as exc:
        return {"error": type(exc).__name__, "text": str(exc)}
    stats = storage.stats()
    objects = storage.object_ranges
    return {
        "data": data,
        "obstore": objects is not None,
        # whether obstore still serves the store: not for a while after a throttle (aiohttp reads Retry-After)
        "obstore_now": objects is not None
        and objects.range(path=f"{storage.root}/{case['name']}", start=0, end=10, if_match=None) is not None,
        "retries": stats.retries,
        "throttled": stats.throttled,
    }


class _Cases(Dataset):
    def __init__(self, cases: list[dict[str, Any]]) -> None:
        self.cases = cases

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return _outcome(self.cases[index])


def test_ranged_reads_through_obstore_keep_the_integrity_rules(
    http_server, remote_data_dir, s3_server, s3_bucket, tmp_path
):
    name = "blob.bin"
    original = (remote_data_dir / name).read_bytes()
    changing = tmp_path / "changing.bin"
    changing.write_bytes(b"a" * 1000)
    gets = {"match": lambda method, path: method == "GET"}
    with (
        FaultProxy(http_server.url, [http_status(503)], **gets) as slow,
        FaultProxy(http_server.url, [reset()], **gets) as resetting,
        RangeHTTPServer(tmp_path) as changing_server,
        ShiftedRangeServer(remote_data_dir) as shifted,
    ):
        plain = {"root": http_server.url, "options": {}, "name": name, "start": 100, "end": 4196}
        cases = [
            plain,
            {**plain, "root": slow.url},
            {**plain, "root": resetting.url},
            {**plain, "root": shifted.url, "start": 0, "end": 100},
            {**plain, "root": changing_server.url, "name": "changing.bin", "replace": str(changing), "size": 1000},
            {**plain, "missing": True},
            {**plain, "root": f"s3://{s3_bucket}", "options": s3_server.storage_options()},
            {**plain, "name": "with space/a b.bin", "start": 100, "end": 1100},
        ]
        results = list(DataLoader(_Cases(cases), batch_size=None, num_workers=1))
    ok, throttled, was_reset, wrong_span, changed, missing, s3, spaced = results
    assert spaced.get("data") == (remote_data_dir / "with space/a b.bin").read_bytes()[100:1100], spaced
    for result in (ok, throttled, was_reset, s3):
        assert result.get("data") == original[100:4196], result
        assert result["obstore"]
    assert (ok["retries"], throttled["retries"], throttled["throttled"]) == (0, 1, 1)
    assert ok["obstore_now"] and s3["obstore_now"] and not throttled["obstore_now"]
    assert (was_reset["retries"], was_reset["throttled"]) == (1, 0)
    assert wrong_span["error"] == "RemoteReadError" and "the server sent bytes" in wrong_span["text"]
    assert changed["error"] == "FileChangedError" and "changed on the server" in changed["text"]
    assert missing["error"] == "FileNotFoundError" and "gone.bin" in missing["text"]


def _redirected_read(case: dict[str, Any]) -> dict[str, Any]:
    """A signed S3 range read through obstore whose endpoint redirects it to another origin."""
    storage = Storage(case["root"], ReadOptions(retry=FAST_RETRY, storage_options=case["options"]))
    reader = RangedReader(storage, f"{storage.root}/f.bin", "f.bin", FileVersion(1024, None))
    try:
        reader.fetch_range(0, 100)
    except (OSError, ValueError) as exc:  # where the redirect leads is not the point: what it carried there is
        return {"obstore": storage.object_ranges is not None, "error": type(exc).__name__}
    return {"obstore": storage.object_ranges is not None}


class _Redirected(Dataset):
    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        return _redirected_read(self.case)


def test_signed_obstore_reads_never_take_credentials_to_another_origin(tmp_path):
    """S3 through obstore signs each request (Authorization, X-Amz-*): a 307 from the endpoint to another origin
    (another port) must reach it without them (reqwest drops Authorization across origins; session tokens, which it
    would forward, keep a root on s3fs)."""
    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / "f.bin").write_bytes(bytes(range(256)) * 4)
    with RecordingServer(tmp_path) as elsewhere, RedirectServer(elsewhere.url) as home:
        options = {"key": "AKIDEXAMPLE", "secret": "do-not-leak", "client_kwargs": {"endpoint_url": home.url}}
        (result,) = DataLoader(_Redirected({"root": "s3://bucket", "options": options}), batch_size=None, num_workers=1)
    assert result["obstore"], result
    assert home.seen and all("authorization" in {k.lower() for k in h} for _, _, h in home.seen)  # signed at home
    assert elsewhere.seen  # the redirect was followed
    signatures = {v for _, _, h in home.seen for k, v in h.items() if k.lower() == "authorization"}
    secret = ("authorization", "x-amz-security-token")
    leaked = [(m, p, k) for m, p, h in elsewhere.seen for k, v in h.items() if k.lower() in secret or v in signatures]
    assert leaked == []  # x-amz-date and x-amz-content-sha256 (the empty body's hash) may go: they are not secrets
