"""HTTP requests through an fsspec HTTP filesystem's aiohttp session: every request robostream makes over HTTP
(sizes, ranges, whole files, the Hub's `/resolve/` and the CDN URLs it names) goes through `http_request`, which
keeps what fsspec's own calls drop (status, Content-Range, ETag), follows redirects itself so that credentials
stay with the origin the user named, and reads no more body than the caller expects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import fsspec
import fsspec.asyn
from yarl import URL

from robostream.errors import TooLargeError
from robostream.storage.integrity import FileVersion
from robostream.storage.redact import redact_url


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


class BodyLimit(NamedTuple):
    """The most bytes an answer's body may hold, and what that bound is (for the error): a body announcing or
    sending more is refused after at most `size` bytes were read."""

    size: int
    why: str  # e.g. "the 120 bytes first seen", "the 100 bytes of the range asked for"


@dataclass(frozen=True)
class Home:
    """The origin the user named (a dataset root, the Hub endpoint) and what is sent to it only: the user and
    password written in `url` (as basic auth) and `request_options`, aiohttp's per-request options (`headers`, ...)."""

    url: str
    request_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, url: str, storage_options: Mapping[str, Any]) -> Home:
        """The home of a root read with these fsspec storage options: those that are request options (fsspec's HTTP
        filesystem sends them with each of its own requests too)."""
        return cls(url, {k: v for k, v in storage_options.items() if k not in FILESYSTEM_OPTIONS})


# What fsspec's HTTP filesystem keeps for itself of its storage options (its constructor's arguments and listings
# cache settings); every other option is an aiohttp request option.
FILESYSTEM_OPTIONS = frozenset(
    (
        "simple_links",
        "block_size",
        "same_scheme",
        "size_policy",
        "cache_type",
        "cache_options",
        "asynchronous",
        "loop",
        "client_kwargs",
        "get_client",
        "encoded",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "skip_instance_cache",
    )
)
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 1 << 20  # a body is read this much at a time, so a bound is kept within a chunk


async def http_request(
    fs: Any,
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    home: Home,
    limit: BodyLimit | None = None,
    stop_off_origin: bool = False,
) -> Answer:
    """One HTTP request with the filesystem's session, redirects followed here.

    home: the URL the user named and its request options: only its origin ever gets the credentials, whatever URL
    is requested and wherever redirects lead: the headers and request options from storage_options (aiohttp strips
    only `Authorization` on a redirect, not an API-key header), the Hub token of a Hub client, and the user and
    password written in the URL (sent as basic auth, never in a URL: aiohttp's errors name the URL).
    The session's ClientTimeout(total=RetryPolicy.timeout_s) bounds the whole request, headers and body: a server
    that trickles them cannot hold a reader. 404/410 -> FileNotFoundError; 412/416 are returned for the caller to
    judge; a body is never read for an error status. limit: read the body, at most this much (more is a
    TooLargeError); None: the body is not read (HEAD).
    stop_off_origin: a redirect to another origin than home's is not requested; its target is the answer's url.
    """
    options = dict(home.request_options)
    home_url = URL(home.url)
    home_auth = aiohttp.BasicAuth.from_url(home_url)  # a user and password written in the URL the user named
    own_headers = {
        **({"Authorization": home_auth.encode()} if home_auth else {}),
        **(options.pop("headers", None) or {}),
    }
    session = await fs.set_session()
    target = URL(fs.encode_url(url)).with_user(None)
    for _ in range(MAX_REDIRECTS + 1):
        at_home = target.origin() == home_url.origin()
        sent = {**own_headers, **headers} if at_home else dict(headers)
        async with session.request(
            method, target, headers=sent, allow_redirects=False, **(options if at_home else {})
        ) as response:
            if response.status in REDIRECTS and "Location" in response.headers:
                target = target.join(URL(response.headers["Location"]))
                if target.scheme not in ("http", "https"):
                    raise ValueError(
                        f"{redact_url(url)}: redirected to {redact_url(str(target))}, which is not an http(s) URL"
                    )
                if stop_off_origin and target.origin() != home_url.origin():
                    return Answer(response.status, None, None, b"", None, str(target))
                continue
            answer = (response.status, response.headers.get("Content-Range"), response.headers.get("ETag"))
            if response.status in (412, 416):
                return Answer(*answer, b"", response.headers.get("Content-Length"), str(target))
            if response.status in (404, 410):
                raise FileNotFoundError(redact_url(url))
            response.raise_for_status()
            body = b"" if limit is None else await _body(response, redact_url(url), limit)
            return Answer(
                *answer,
                body,
                response.headers.get("Content-Length"),
                str(target),
                response.headers.get("Last-Modified"),
            )
    raise ValueError(f"{redact_url(url)}: more than {MAX_REDIRECTS} redirects")


async def _body(response: aiohttp.ClientResponse, name: str, limit: BodyLimit) -> bytes:
    """The answer's body, read a chunk at a time and refused as soon as it announces or holds more than `limit`."""
    announced = response.content_length
    if announced is not None and announced > limit.size:
        raise TooLargeError(
            f"{name}: the server announces {announced} bytes (Content-Length), more than {limit.why}; nothing was read"
        )
    if announced is not None:  # within the limit: read whole by aiohttp, which stops at Content-Length
        return await response.read()
    body = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK):
        body += chunk
        if len(body) > limit.size:
            raise TooLargeError(
                f"{name}: the server sent more than {limit.why}; stopped reading after {len(body)} bytes"
            )
    return bytes(body)


async def http_range(fs: Any, url: str, start: int, end: int, if_match: str | None, *, home: Home) -> Answer:
    """GET bytes [start, end), keeping status and headers (fsspec's cat_file drops them); a body longer than the
    range is refused unread (a server that ignores Range would send the whole file)."""
    headers = {"Range": f"bytes={start}-{end - 1}", **({"If-Match": if_match} if if_match else {})}
    limit = BodyLimit(
        end - start,
        f"the {end - start} bytes of the range {start}-{end - 1} asked for: the server "
        "ignored the byte range; ranged reads need a server that supports HTTP Range "
        "requests",
    )
    return await http_request(fs, "GET", url, headers, home=home, limit=limit)


async def http_opening(fs: Any, url: str, byte_range: str, nbytes: int, *, home: Home) -> Answer:
    """GET `byte_range` ("bytes=0-N" or "bytes=-N", at most `nbytes` bytes) of a file whose version is not known
    yet (no If-Match): the answer's Content-Range and ETag name the version, as a HEAD would (see
    Storage.open)."""
    headers = {"Range": byte_range, "Accept-Encoding": "identity"}
    limit = BodyLimit(
        nbytes,
        f"the {nbytes} bytes of the range {byte_range} asked for: the server ignored the byte range; ranged reads "
        "need a server that supports HTTP Range requests",
    )
    return await http_request(fs, "GET", url, headers, home=home, limit=limit)


async def http_head(fs: Any, url: str, *, home: Home) -> FileVersion:
    """Content-Length, ETag and Last-Modified from a HEAD request (fsspec's HTTP filesystem reports any failed
    HEAD, a 503 too, as "not found", and its info() may GET the whole file: ask the server ourselves)."""
    answer = await http_request(fs, "HEAD", url, {"Accept-Encoding": "identity"}, home=home)
    if answer.content_length is None:
        raise ValueError(f"{redact_url(url)}: the server gives no Content-Length; ranged reads need it")
    return FileVersion(int(answer.content_length), answer.etag, last_modified=answer.last_modified)


async def http_whole(fs: Any, url: str, limit: BodyLimit, *, home: Home) -> bytes:
    """A whole file's bytes (GET, no range), at most `limit`."""
    answer = await http_request(fs, "GET", url, {"Accept-Encoding": "identity"}, home=home, limit=limit)
    return answer.body


def http_stat(fs: Any, url: str, *, home: Home) -> FileVersion:
    """`http_head` from a thread outside the filesystem's event loop."""
    return fsspec.asyn.sync(fs.loop, http_head, fs, url, home=home)


def http_get(fs: Any, url: str, limit: BodyLimit, *, home: Home) -> bytes:
    """`http_whole` from a thread outside the filesystem's event loop."""
    return fsspec.asyn.sync(fs.loop, http_whole, fs, url, limit, home=home)
