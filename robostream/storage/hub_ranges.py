"""Reads of Hub repository files (byte ranges, and metadata files whole, bounded) straight from where the Hub serves
their bytes, resolved once per file.

HfFileSystem sends every range to the Hub's `/resolve/` URL, which answers LFS and Xet files with a redirect to a
CDN or Xet bridge URL: two round trips per range, each through the Hub's API host. Here each file's `/resolve/` is
asked once per process and ranges then go straight to the URL it named, many at once through aiohttp, with status
and Content-Range checked like any other ranged read. The token goes to the Hub's endpoint only: the home origin of
every request here is the endpoint's, never the CDN or Xet host a `/resolve/` names (as huggingface_hub's own
redirected requests carry none). The revision is a commit (Storage pins it), so the bytes behind a file's URL never
change; a signed URL that has expired (401/403) is resolved again at the next try (RetryPolicy treats it as
transient).
"""

from __future__ import annotations

import threading
from typing import Any

import aiohttp
import fsspec
import fsspec.asyn

from robostream.storage.http import REDIRECTS, Answer, BodyLimit, Home, http_range, http_request

EXPIRED = (401, 403)  # what a signed URL past its lifetime answers


class HubRanges:
    """One process's direct reads of the files of one Hub filesystem (an `HfFileSystem`)."""

    def __init__(self, hub: Any, http_options: dict[str, Any]) -> None:
        from huggingface_hub.utils import build_hf_headers

        self._hub = hub
        # The Hub's headers (the token) go to the endpoint's origin only (http_request).
        self._home = Home(hub.endpoint, {"headers": build_hf_headers(token=hub.token)})
        self._http = fsspec.filesystem("http", skip_instance_cache=True, **http_options)
        self._urls: dict[str, str] = {}
        self._lock = threading.Lock()

    def range(self, path: str, start: int, end: int) -> Answer:
        """Bytes [start, end) of the file at `path` (an hf:// path at a commit), with the answer's headers."""
        with self._lock:
            url = self._urls.get(path)
        if url is None:
            url = self._resolve(path)
        try:
            answer = fsspec.asyn.sync(self._http.loop, http_range, self._http, url, start, end, None, home=self._home)
        except aiohttp.ClientResponseError as exc:
            if exc.status not in EXPIRED:
                raise
            with self._lock:
                self._urls.pop(path, None)
            raise ConnectionError(f"{url}: {exc.status} {exc.message}; the file's URL is resolved again") from exc
        # The CDN's ETag is its own, not the Hub's: the pinned commit is what names this version.
        return answer._replace(etag=None)

    def whole(self, path: str, limit: BodyLimit) -> bytes:
        """The whole file at `path`, at most `limit` bytes (more: TooLargeError, after at most that much was read):
        its `/resolve/` answers a small file itself, and names where an LFS or Xet file's bytes are (remembered for
        the file's ranges), in as many requests as huggingface_hub makes."""
        answer = self._request("GET", self._resolve_url(path), limit)
        if answer.status in REDIRECTS:  # the bytes are on another origin
            elsewhere = _where(answer)
            with self._lock:
                self._urls[path] = elsewhere
            answer = self._request("GET", elsewhere, limit)
        return answer.body

    def _resolve(self, path: str) -> str:
        url = _where(self._request("HEAD", self._resolve_url(path), None))
        with self._lock:
            self._urls[path] = url
        return url

    def _resolve_url(self, path: str) -> str:
        from huggingface_hub import hf_hub_url

        resolved = self._hub.resolve_path(path)
        return hf_hub_url(
            resolved.repo_id,
            resolved.path_in_repo,
            repo_type=resolved.repo_type,
            revision=resolved.revision,
            endpoint=self._hub.endpoint,
        )

    def _request(self, method: str, url: str, limit: BodyLimit | None) -> Answer:
        """One request, the token for the endpoint's origin only; a redirect off it is returned, not followed."""
        return fsspec.asyn.sync(
            self._http.loop,
            http_request,
            self._http,
            method,
            url,
            {"Accept-Encoding": "identity"},
            home=self._home,
            limit=limit,
            stop_off_origin=True,
        )


def _where(answer: Answer) -> str:
    """Where an answer of http_request came from (it always says)."""
    assert answer.url is not None
    return answer.url
