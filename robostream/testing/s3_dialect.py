"""The slow store in an S3 dialect: :class:`S3RangeServer`, path-style ``/<bucket>/<key>`` over a folder whose
subfolders are buckets, with GetObject/HeadObject, HeadBucket and ListObjectsV2 answered as S3 answers them, for
s3fs/botocore and for the Rust ``object_store`` crate that lance/LanceDB read with. Its requests wait, are admitted
and counted as the plain HTTP store's (:mod:`robostream.testing.slow_store`) are. Nothing here leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path
from typing import Any

from robostream.testing.slow_store import RangeHandler, RangeHTTPServer

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
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> None:
        """An S3 error answer: ``<Error><Code>..</Code><Message>..</Message>...</Error>`` (HEAD: no body), with
        `fields` (the error's other elements: BucketName, Key, ...) after the message."""
        import xml.etree.ElementTree as ET

        error = ET.Element("Error")
        for tag, text in {"Code": code, "Message": message, **(fields or {}), "RequestId": "slow-store"}.items():
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
            self.s3_error(404, "NoSuchBucket", "The specified bucket does not exist", fields={"BucketName": bucket})
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
                fields={
                    "Key": key,
                    "BucketName": bucket,
                    "Resource": url_path,
                    **({} if file is None else {"VersionId": version_id}),
                },
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
