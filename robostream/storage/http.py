"""HTTP requests for ranged reads, through an fsspec HTTP filesystem's aiohttp session, keeping what fsspec's own
calls drop (status, Content-Range, ETag), with redirects followed here so credentials stay with their origin."""

from __future__ import annotations

from typing import Any, NamedTuple

import fsspec
import fsspec.asyn
from yarl import URL

from robostream.storage.integrity import FileVersion


class Answer(NamedTuple):
    """A request's answer: HTTP status, Content-Range and ETag headers (None: not known), the body and the
    Content-Length header."""

    status: int | None
    content_range: str | None
    etag: str | None
    body: bytes
    content_length: str | None = None
    url: str | None = None  # where the answer came from, after the redirects followed
    last_modified: str | None = None  # the Last-Modified header (names a version where the server gives no ETag)


MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


async def http_request(fs: Any, method: str, url: str, headers: dict[str, str], *,
                       stop_off_origin: bool = False) -> Answer:
    """One HTTP request with the filesystem's session and request options, redirects followed here: the headers
    and request options from storage_options (credentials) go to the URL's own origin only, never to another host
    a redirect names (aiohttp strips only `Authorization`, not an API-key header or a cookie). The session's
    ClientTimeout(total=RetryPolicy.timeout_s) bounds the whole request, headers and body: a server that trickles
    them cannot hold a reader. 404/410 -> FileNotFoundError; 412/416 are returned for the caller to judge.
    stop_off_origin: a redirect to another origin is not requested; its target comes back as the answer's url."""
    options = dict(fs.kwargs)
    own_headers = options.pop("headers", None) or {}
    session = await fs.set_session()
    target = URL(fs.encode_url(url))
    origin = target.origin()
    for _ in range(MAX_REDIRECTS + 1):
        home = target.origin() == origin
        sent = {**own_headers, **headers} if home else dict(headers)
        async with session.request(method, target, headers=sent, allow_redirects=False,
                                   **(options if home else {})) as response:
            if response.status in REDIRECTS and "Location" in response.headers:
                target = target.join(URL(response.headers["Location"]))
                if target.scheme not in ("http", "https"):
                    raise ValueError(f"{url}: redirected to {target}, which is not an http(s) URL")
                if stop_off_origin and target.origin() != origin:
                    return Answer(response.status, None, None, b"", None, str(target))
                continue
            answer = (response.status, response.headers.get("Content-Range"), response.headers.get("ETag"))
            if response.status in (412, 416):
                return Answer(*answer, b"", response.headers.get("Content-Length"), str(target))
            if response.status in (404, 410):
                raise FileNotFoundError(url)
            body = await response.read() if method == "GET" else b""
            response.raise_for_status()
            return Answer(*answer, body, response.headers.get("Content-Length"), str(target),
                          response.headers.get("Last-Modified"))
    raise ValueError(f"{url}: more than {MAX_REDIRECTS} redirects")


async def http_range(fs: Any, url: str, start: int, end: int, if_match: str | None) -> Answer:
    """GET bytes [start, end), keeping status and headers (fsspec's cat_file drops them)."""
    headers = {"Range": f"bytes={start}-{end - 1}", **({"If-Match": if_match} if if_match else {})}
    return await http_request(fs, "GET", url, headers)


def http_stat(fs: Any, url: str) -> FileVersion:
    """Content-Length, ETag and Last-Modified from a HEAD request (fsspec's HTTP filesystem reports any failed
    HEAD, a 503 too, as "not found", and its info() may GET the whole file: ask the server ourselves)."""
    answer = fsspec.asyn.sync(fs.loop, http_request, fs, "HEAD", url, {"Accept-Encoding": "identity"})
    if answer.content_length is None:
        raise ValueError(f"{url}: the server gives no Content-Length; ranged reads need it")
    return FileVersion(int(answer.content_length), answer.etag, last_modified=answer.last_modified)


