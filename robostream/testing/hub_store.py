"""A tiny Hugging Face Hub emulator on 127.0.0.1, serving dataset repos from local folders.

It implements exactly the endpoints that huggingface_hub's ``HfApi.dataset_info`` / ``repo_info`` and
``HfFileSystem`` (listing, info, ranged and streamed reads) use:

- ``GET /api/datasets/{repo_id}`` and ``GET /api/datasets/{repo_id}/revision/{revision}``: repo info (``id``,
  ``sha``, ``siblings``, ...). Unknown repo -> 404 ``X-Error-Code: RepoNotFound``; unknown revision -> 404
  ``X-Error-Code: RevisionNotFound`` (the codes huggingface_hub maps to its typed errors).
- ``GET /api/datasets/{repo_id}/tree/{revision}[/{path}]?recursive=&expand=&cursor=``: a JSON list of
  ``{"type": "file"|"directory", "path", "oid", "size"}`` (LFS files, as on the Hub: ``"lfs": {"oid": <sha256 of
  the content>, "size", "pointerSize"}`` and ``oid`` the git blob sha1 of the LFS pointer file; other files:
  ``oid`` the git blob sha1 of the content), paginated with a ``Link: <...>; rel="next"`` header
  (``page_size`` entries per page). The path may be percent-encoded as a whole (``meta%2Fepisodes``), as
  huggingface_hub sends it. A path that is not a folder -> 404 ``EntryNotFound``.
- ``POST /api/datasets/{repo_id}/paths-info/{revision}``: form body ``paths=...&paths=...&expand=...``; the
  entries that exist.
- ``GET``/``HEAD /datasets/{repo_id}/resolve/{revision}/{path}``: the file, with ``Range`` support (206,
  ``Content-Range``, 416 past the end), ``ETag``, ``X-Repo-Commit``, ``Accept-Ranges``. Files whose suffix is in
  ``lfs_suffixes`` are, like LFS/Xet files on the real Hub, answered with a 302 to ``<cdn_url>/cdn/...`` (carrying
  ``X-Linked-Size`` / ``X-Linked-ETag``, the content's sha256, and ``X-Repo-Commit``), which serves the bytes with
  the same Range support. The CDN is another origin, as on the real Hub (another port of 127.0.0.1): it serves
  ``/cdn/`` only, and the API host does not; ``cdn_url`` is where the redirects point (the CDN's own endpoint, or a
  proxy a test puts in front of it).

Writes, as huggingface_hub's commit path uses them (with ``HF_HUB_DISABLE_XET=1``: the LFS protocol, not Xet):
``POST /api/datasets/{repo_id}/preupload/{revision}`` (LFS for ``lfs_suffixes``), ``POST
/datasets/{repo_id}.git/info/lfs/objects/batch`` (basic transfer) and ``PUT /lfs-upload/...`` (sha256 checked),
``POST /api/datasets/{repo_id}/commit/{branch}`` (ndjson; ``parentCommit`` checked: 412 when the branch moved),
``POST /api/datasets/{repo_id}/tag/{revision}``, ``DELETE /api/datasets/{repo_id}/tag/{tag}``, ``GET .../refs``.

Revisions: branches (``main``), tags (the ``tags`` given, at the initial commit) and commit shas; the initial
commit is the fixed fake sha (40 hex characters); each commit makes a new one.
Every request is recorded (method, path, status, bytes sent), and the headers each origin received (``header_log``),
so tests can check what was asked for and that credentials went to the Hub only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from robostream.testing.slow_store import CHUNK, InFlight

DEFAULT_SHA = "0123456789abcdef0123456789abcdef01234567"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Snapshot:
    """The files of one commit: path -> a file on disk (the repo's initial folder) or bytes (committed later).
    Files whose name ends with one of ``lfs_suffixes`` are LFS files."""

    def __init__(self, files: Mapping[str, Path | bytes], lfs_suffixes: tuple[str, ...] = ()) -> None:
        self.files = dict(sorted(files.items()))
        self.lfs_suffixes = lfs_suffixes
        self.dirs: set[str] = {""}
        for name in self.files:
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                self.dirs.add("/".join(parts[:i]))
        self._oids: dict[str, str] = {}
        self._sha256: dict[str, str] = {}

    def data(self, name: str) -> bytes:
        value = self.files[name]
        return value if isinstance(value, bytes) else value.read_bytes()

    def read(self, name: str, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of a file, reading only those from disk."""
        value = self.files[name]
        if isinstance(value, bytes):
            return value[start:stop]
        with value.open("rb") as handle:
            handle.seek(start)
            return handle.read(stop - start)

    def size(self, name: str) -> int:
        value = self.files[name]
        return len(value) if isinstance(value, bytes) else value.stat().st_size

    def oid(self, name: str) -> str:
        """git blob sha1 of a file (or a stable fake id for a folder)."""
        if name not in self._oids:
            if name in self.files:
                data = self.data(name)
                self._oids[name] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            else:
                self._oids[name] = hashlib.sha1(f"tree {name}".encode()).hexdigest()
        return self._oids[name]

    def is_lfs(self, name: str) -> bool:
        return name.endswith(self.lfs_suffixes) if self.lfs_suffixes else False

    def sha256(self, name: str) -> str:
        if name not in self._sha256:
            self._sha256[name] = hashlib.sha256(self.data(name)).hexdigest()
        return self._sha256[name]

    def etag(self, name: str) -> str:
        """What the Hub sends as (X-Linked-)ETag: the sha256 of an LFS file's content, else its git blob sha1."""
        return f'"{self.sha256(name) if self.is_lfs(name) else self.oid(name)}"'

    def entry(self, name: str) -> dict[str, Any]:
        if name in self.files:
            if not self.is_lfs(name):
                return {"type": "file", "oid": self.oid(name), "size": self.size(name), "path": name}
            # as on the Hub: oid is the pointer file's blob id, lfs.oid the content's sha256
            pointer = (
                f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256(name)}\nsize {self.size(name)}\n"
            ).encode()
            return {
                "type": "file",
                "oid": hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest(),
                "size": self.size(name),
                "path": name,
                "lfs": {"oid": self.sha256(name), "size": self.size(name), "pointerSize": len(pointer)},
            }
        return {"type": "directory", "oid": self.oid(name), "size": 0, "path": name}

    def children(self, folder: str) -> list[str]:
        prefix = folder + "/" if folder else ""
        names = {n for n in (*self.dirs, *self.files) if n and n.startswith(prefix) and "/" not in n[len(prefix) :]}
        # folders first, then files (the Hub's "tree first" order), each sorted
        return sorted(names, key=lambda n: (n in self.files, n))

    def listing(self, folder: str, recursive: bool) -> list[str]:
        out: list[str] = []
        for name in self.children(folder):
            out.append(name)
            if recursive and name in self.dirs:
                out.extend(self.listing(name, True))
        return out


class _Repo:
    """A dataset repo: commits (sha -> snapshot), branches and tags (name -> sha), uploaded LFS objects."""

    def __init__(
        self, repo_id: str, folder: Path, sha: str, tags: tuple[str, ...] = (), lfs_suffixes: tuple[str, ...] = ()
    ) -> None:
        self.repo_id = repo_id
        self.lfs_suffixes = lfs_suffixes
        folder = Path(folder).resolve()
        initial = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
        self.commits: dict[str, _Snapshot] = {sha: _Snapshot(initial, lfs_suffixes)}
        self.branches: dict[str, str] = {"main": sha}
        self.tags: dict[str, str] = {tag: sha for tag in tags}
        self.lfs: dict[str, bytes] = {}  # sha256 hex -> uploaded bytes
        self.lock = threading.Lock()

    @property
    def sha(self) -> str:
        return self.branches["main"]

    def resolve(self, revision: str) -> str | None:
        """The commit sha a branch, tag or sha names (None: unknown)."""
        if revision in self.commits:
            return revision
        return self.branches.get(revision) or self.tags.get(revision)

    def snapshot(self, revision: str) -> _Snapshot | None:
        sha = self.resolve(revision)
        return None if sha is None else self.commits[sha]


class HubServer:
    """``with HubServer({"local/av1": folder}) as hub: hub.endpoint`` -> ``http://127.0.0.1:<port>``.

    A slow Hub, as the real one is from a training node: ``latency_s`` before the first byte of every answer,
    ``bandwidth`` bytes/s per connection, at most ``max_in_flight`` requests served at once (robostream bench
    ``--store_api hub``); ``summary()`` counts requests, bytes and requests in flight, as the slow store's does.
    """

    def __init__(
        self,
        repos: dict[str, Path],
        sha: str = DEFAULT_SHA,
        page_size: int = 1000,
        lfs_suffixes: tuple[str, ...] = (".parquet", ".mp4"),
        tags: tuple[str, ...] = (),
        *,
        latency_s: float = 0.0,
        bandwidth: float | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        """Args:
        repos: repo id -> the folder holding its files (its first commit).
        sha: the first commit's sha.
        page_size: entries per page of a tree listing.
        lfs_suffixes: files served as LFS files (a redirect to the CDN route).
        tags: tags at the first commit (e.g. the codebase version lerobot resolves).
        latency_s: seconds before the first byte of every answer.
        bandwidth: bytes/s per connection (None: as fast as loopback goes).
        max_in_flight: requests answered at once (the others wait; None: any number).
        """
        self.repos = {repo_id: _Repo(repo_id, folder, sha, tags, lfs_suffixes) for repo_id, folder in repos.items()}
        self.sha = sha
        self.page_size = page_size
        self.lfs_suffixes = lfs_suffixes
        self.latency_s, self.bandwidth = latency_s, bandwidth
        self.load = InFlight(max_in_flight)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, int, int]] = []  # (method, path with query, status, body bytes)
        self.headers_seen: list[tuple[str, str, str, dict[str, str]]] = []  # (origin, method, path, headers)
        self.cdn_url: str | None = None  # where LFS redirects point (None until started: the CDN's endpoint)
        self._servers: list[ThreadingHTTPServer] = []  # the API host, the CDN
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """The API host (huggingface_hub's HF_ENDPOINT)."""
        assert self._servers, "server not started"
        return f"http://127.0.0.1:{self._servers[0].server_port}"

    @property
    def cdn_endpoint(self) -> str:
        """The CDN serving LFS files' bytes: another origin than the API host."""
        assert self._servers, "server not started"
        return f"http://127.0.0.1:{self._servers[1].server_port}"

    def start(self) -> Self:
        hub: HubServer = self

        class Handler(_HubHandler):
            server_hub = hub

        class CdnHandler(_CdnHandler):
            server_hub = hub

        for repo in self.repos.values():  # content hashes up front: no measured request waits for one
            snapshot = repo.commits[repo.sha]
            for name in snapshot.files:
                snapshot.etag(name)
        self._stopping.clear()
        for name, handler in (("hub-server", Handler), ("hub-cdn", CdnHandler)):
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.cdn_url = self.cdn_endpoint
        return self

    def stop(self) -> None:
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers, self._threads = [], []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- stats -------------------------------------------------------------------------------------------------
    def record(self, method: str, path: str, status: int, nbytes: int) -> None:
        with self._lock:
            self.requests.append((method, path, status, nbytes))

    def record_headers(self, origin: str, method: str, path: str, headers: dict[str, str]) -> None:
        with self._lock:
            self.headers_seen.append((origin, method, path, headers))

    def reset_stats(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers_seen.clear()
        self.load.reset()

    def summary(self, span_s: float) -> dict[str, float | int]:
        """Requests and body bytes served since the last reset, the most in flight at once, and the mean in flight
        over the `span_s` seconds that passed (the slow store's `summary`)."""
        with self._lock:
            requests, sent = len(self.requests), sum(entry[3] for entry in self.requests)
        return {
            "requests": requests,
            "bytes": sent,
            "in_flight_max": self.load.most,
            "in_flight_mean": self.load.request_s / span_s if span_s > 0 else 0.0,
            "cpu_s": self.load.cpu_s,
        }

    def log(self) -> list[tuple[str, str, int, int]]:
        with self._lock:
            return list(self.requests)

    def header_log(self) -> list[tuple[str, str, str, dict[str, str]]]:
        """(origin: "hub" or "cdn", method, path, the request's headers, names lowercased) of every request since
        the last reset."""
        with self._lock:
            return list(self.headers_seen)


class _HubHandler(BaseHTTPRequestHandler):
    server_hub: HubServer
    origin = "hub"  # which host this handler serves: "hub" (the API, /resolve/) or "cdn" (LFS bytes, /cdn/ only)
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per answer (see slow_store.QuietHandler)

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- helpers -----------------------------------------------------------------------------------------------
    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        head: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        hub = self.server_hub
        # Logged before the answer goes out: a client holding its answer always finds it in the log (logged after,
        # a test that read the log right after a request raced the server's thread).
        hub.record(self.command, self.path, status, 0 if head else len(body))
        self.end_headers()
        if not head and body:
            began = time.monotonic()
            for start in range(0, len(body), CHUNK):
                self.wfile.write(body[start : start + CHUNK])
                if hub.bandwidth:  # one connection's rate: the next chunk waits until this one's time is up
                    hub._stopping.wait(max(0.0, began + (start + CHUNK) / hub.bandwidth - time.monotonic()))

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """A request's headers are logged (header_log), then it waits its turn (max_in_flight) and the first-byte
        latency, as a real Hub makes it."""
        hub = self.server_hub
        hub.record_headers(self.origin, self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        with hub.load.admitted():
            if hub.latency_s:
                hub._stopping.wait(hub.latency_s)
            yield

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), headers)

    def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
        self._send(
            status,
            json.dumps({"error": message}).encode(),
            {"X-Error-Code": code, "X-Error-Message": message},
            head=head,
        )

    def _repo(self, segments: list[str]) -> tuple[_Repo | None, list[str]]:
        """The repo named by the first two segments (owner/name) and the remaining segments."""
        if len(segments) < 2:
            return None, segments
        return self.server_hub.repos.get(f"{unquote(segments[0])}/{unquote(segments[1])}"), segments[2:]

    # -- routing -----------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        with self._turn():
            self._route(head=False)

    def do_HEAD(self) -> None:
        with self._turn():
            self._route(head=True)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_POST(self) -> None:
        with self._turn():
            body = self._body()
            split = urlsplit(self.path)
            segments = split.path.strip("/").split("/")
            if segments[:2] == ["api", "datasets"]:
                repo, rest = self._repo(segments[2:])
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if len(rest) >= 2 and rest[0] == "paths-info":
                    return self._paths_info(repo, unquote("/".join(rest[1:])), body)
                if len(rest) >= 2 and rest[0] == "preupload":
                    return self._preupload(repo, json.loads(body))
                if len(rest) >= 2 and rest[0] == "commit":
                    return self._commit(repo, unquote("/".join(rest[1:])), body)
                if len(rest) >= 2 and rest[0] == "tag":
                    return self._create_tag(repo, unquote("/".join(rest[1:])), json.loads(body))
            if (
                segments[:1] == ["datasets"]
                and len(segments) == 7
                and segments[3:] == ["info", "lfs", "objects", "batch"]
            ):
                repo, _ = self._repo([segments[1], segments[2].removesuffix(".git")])
                if repo is not None:
                    return self._lfs_batch(repo, json.loads(body))
            self._error(404, "NotFound", f"no route for POST {split.path}")

    def do_PUT(self) -> None:
        with self._turn():
            body = self._body()
            segments = urlsplit(self.path).path.strip("/").split("/")
            if segments[:1] == ["lfs-upload"] and len(segments) == 4:
                repo, rest = self._repo(segments[1:])
                if repo is not None:
                    if hashlib.sha256(body).hexdigest() != rest[0]:
                        return self._error(400, "BadRequest", "uploaded bytes do not match the oid")
                    with repo.lock:
                        repo.lfs[rest[0]] = body
                    return self._send(200, b"")
            self._error(404, "NotFound", f"no route for PUT {self.path}")

    def do_DELETE(self) -> None:
        with self._turn():
            segments = urlsplit(self.path).path.strip("/").split("/")
            if segments[:2] == ["api", "datasets"]:
                repo, rest = self._repo(segments[2:])
                if repo is not None and len(rest) == 2 and rest[0] == "tag":
                    with repo.lock:
                        if repo.tags.pop(unquote(rest[1]), None) is None:
                            return self._error(404, "RevisionNotFound", f"tag {rest[1]} not found")
                    return self._send(200, b"")
            self._error(404, "NotFound", f"no route for DELETE {self.path}")

    def _route(self, head: bool) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        segments = split.path.strip("/").split("/")
        if self.origin == "cdn":
            return self._cdn(segments, head)
        if segments[:2] == ["api", "datasets"]:
            repo, rest = self._repo(segments[2:])
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found", head)
            if not rest:
                return self._info(repo, "main", head)
            if rest[0] == "revision" and len(rest) >= 2:
                return self._info(repo, unquote("/".join(rest[1:])), head)
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(repo, unquote(rest[1]), unquote("/".join(rest[2:])), query, head)
            if rest[0] == "refs":
                return self._json(
                    200,
                    {
                        "branches": [
                            {"name": b, "ref": f"refs/heads/{b}", "targetCommit": s} for b, s in repo.branches.items()
                        ],
                        "tags": [{"name": t, "ref": f"refs/tags/{t}", "targetCommit": s} for t, s in repo.tags.items()],
                        "converts": [],
                    },
                )
        elif segments[:1] == ["datasets"] and len(segments) >= 6 and segments[3] == "resolve":
            repo, rest = self._repo(segments[1:])
            return self._resolve(repo, unquote(rest[1]), unquote("/".join(rest[2:])), head)
        self._error(404, "NotFound", f"no route for {self.command} {split.path}", head)

    def _cdn(self, segments: list[str], head: bool) -> None:
        """The CDN's one route: /cdn/{repo_id}/{sha}/{path}, an LFS file's bytes at a commit."""
        if segments[:1] == ["cdn"] and len(segments) >= 5:
            repo, rest = self._repo(segments[1:])
            if repo is not None and rest[0] in repo.commits:
                return self._file(repo.commits[rest[0]], unquote("/".join(rest[1:])), head, {"X-Repo-Commit": rest[0]})
        self._error(404, "NotFound", f"no route on the CDN for {self.command} {self.path}", head)

    # -- endpoints ---------------------------------------------------------------------------------------------
    def _info(self, repo: _Repo, revision: str, head: bool) -> None:
        sha = repo.resolve(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        self._json(
            200,
            {
                "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": sha,
                "lastModified": "2024-01-01T00:00:00.000Z",
                "createdAt": "2024-01-01T00:00:00.000Z",
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": ["LeRobot"],
                "siblings": [{"rfilename": name} for name in repo.commits[sha].files],
            },
        )

    def _tree(self, repo: _Repo, revision: str, path: str, query: dict[str, list[str]], head: bool) -> None:
        snapshot = repo.snapshot(revision)
        if snapshot is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        path = path.strip("/")
        if path not in snapshot.dirs:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}", head)
        recursive = (query.get("recursive") or ["False"])[0].lower() in ("1", "true")
        names = snapshot.listing(path, recursive)
        cursor = int((query.get("cursor") or ["0"])[0])
        page = names[cursor : cursor + self.server_hub.page_size]
        headers = {}
        if cursor + self.server_hub.page_size < len(names):
            params = {k: v[0] for k, v in query.items() if k != "cursor"}
            params["cursor"] = str(cursor + self.server_hub.page_size)
            encoded = "/" + quote(path, safe="") if path else ""
            url = (
                f"{self.server_hub.endpoint}/api/datasets/{repo.repo_id}/tree/{quote(revision, safe='')}"
                f"{encoded}?{urlencode(params)}"
            )
            headers["Link"] = f'<{url}>; rel="next"'
        self._json(200, [snapshot.entry(n) for n in page], headers)

    def _paths_info(self, repo: _Repo, revision: str, body: bytes) -> None:
        snapshot = repo.snapshot(revision)
        if snapshot is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        form = parse_qs(body.decode("utf-8"))
        paths = [p.strip("/") for p in form.get("paths", [])]
        self._json(200, [snapshot.entry(p) for p in paths if p in snapshot.files or (p and p in snapshot.dirs)])

    def _resolve(self, repo: _Repo | None, revision: str, path: str, head: bool) -> None:
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found", head)
        sha = repo.resolve(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        snapshot = repo.commits[sha]
        if path not in snapshot.files:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}", head)
        common = {"X-Repo-Commit": sha, "ETag": snapshot.etag(path)}
        if snapshot.is_lfs(path):
            # LFS/Xet files on the Hub: a redirect to the storage host, metadata on the redirect itself
            location = f"{self.server_hub.cdn_url}/cdn/{repo.repo_id}/{sha}/{quote(path)}"
            return self._send(
                302,
                b"",
                {
                    **common,
                    "Location": location,
                    "X-Linked-Size": str(snapshot.size(path)),
                    "X-Linked-ETag": snapshot.etag(path),
                },
                head=head,
            )
        self._file(snapshot, path, head, common)

    def _file(self, snapshot: _Snapshot, path: str, head: bool, headers: dict[str, str]) -> None:
        if path not in snapshot.files:
            return self._error(404, "EntryNotFound", f"{path} not found", head)
        size = snapshot.size(path)
        headers = {**headers, "Accept-Ranges": "bytes", "ETag": snapshot.etag(path)}
        spec = self.headers.get("Range")
        if spec:
            match = _RANGE.match(spec.strip())
            if match is None:
                return self._send(416, b"", {**headers, "Content-Range": f"bytes */{size}"}, head=head)
            first, last = match.groups()
            if first == "":  # suffix range: the last N bytes
                start, end = max(0, size - int(last or 0)), size - 1
            else:
                start, end = int(first), (int(last) if last else size - 1)
            end = min(end, size - 1)
            if start >= size or start > end:
                return self._send(416, b"", {**headers, "Content-Range": f"bytes */{size}"}, head=head)
            body = snapshot.read(path, start, end + 1)
            return self._send(
                206,
                body,
                {**headers, "Content-Range": f"bytes {start}-{end}/{size}"},
                content_type="application/octet-stream",
                head=head,
            )
        self._send(
            200,
            b"" if head else snapshot.data(path),
            {**headers, "Content-Length": str(size)},
            content_type="application/octet-stream",
            head=head,
        )

    # -- writes: preupload, LFS batch + upload, commit, tags -------------------------------------------------
    def _preupload(self, repo: _Repo, payload: dict[str, Any]) -> None:
        files = [
            {
                "path": f["path"],
                "shouldIgnore": False,
                "oid": None,
                "uploadMode": "lfs" if f["path"].endswith(self.server_hub.lfs_suffixes) else "regular",
            }
            for f in payload["files"]
        ]
        self._json(200, {"files": files, "commitOid": repo.sha})

    def _lfs_batch(self, repo: _Repo, payload: dict[str, Any]) -> None:
        objects = []
        for obj in payload["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in repo.lfs:
                href = f"{self.server_hub.endpoint}/lfs-upload/{repo.repo_id}/{obj['oid']}"
                entry["actions"] = {"upload": {"href": href, "header": {}}}
            objects.append(entry)
        self._json(200, {"transfer": "basic", "objects": objects})

    def _commit(self, repo: _Repo, revision: str, body: bytes) -> None:
        lines = [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]
        header = lines[0]["value"]
        with repo.lock:
            if revision not in repo.branches:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            parent = repo.branches[revision]
            if header.get("parentCommit") not in (None, parent):
                return self._error(412, "PreconditionFailed", f"A commit has happened since {header['parentCommit']}")
            files = dict(repo.commits[parent].files)
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "lfsFile":
                    if value["oid"] not in repo.lfs:
                        return self._error(422, "LfsObjectMissing", f"{value['path']}: LFS object not uploaded")
                    files[value["path"]] = repo.lfs[value["oid"]]
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        return self._error(
                            404, "EntryNotFound", f"A file with this name doesn't exist: {value['path']}"
                        )
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    for name in [n for n in files if n.startswith(prefix)]:
                        del files[name]
            sha = hashlib.sha1(f"{parent}{len(repo.commits)}{body!r}".encode()).hexdigest()
            repo.commits[sha] = _Snapshot(files, repo.lfs_suffixes)
            repo.branches[revision] = sha
        self._json(
            200,
            {
                "commitUrl": f"{self.server_hub.endpoint}/datasets/{repo.repo_id}/commit/{sha}",
                "commitOid": sha,
                "pullRequestUrl": None,
            },
        )

    def _create_tag(self, repo: _Repo, revision: str, payload: dict[str, Any]) -> None:
        with repo.lock:
            sha = repo.resolve(revision)
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            if payload["tag"] in repo.tags:
                return self._error(409, "Conflict", f"tag {payload['tag']} already exists")
            repo.tags[payload["tag"]] = sha
        self._send(200, b"")


class _CdnHandler(_HubHandler):
    """The CDN host: LFS files' bytes (GET and HEAD of /cdn/...), nothing else."""

    origin = "cdn"

    def _refuse(self) -> None:
        with self._turn():
            self._error(405, "MethodNotAllowed", f"the CDN serves GET and HEAD only, not {self.command}")

    do_POST = do_PUT = do_DELETE = _refuse  # noqa: N815 - stdlib naming


# -- the client side: huggingface_hub pointed at an emulator, nothing but 127.0.0.1 reachable --------------------


@contextmanager
def hub_environment(endpoint: str, home: Path) -> Iterator[None]:
    """Point huggingface_hub at `endpoint` with a fake token and `home` as HF_HOME, in this process (its constants)
    and in the processes it starts (the environment), and put both back after.

    huggingface_hub reads HF_ENDPOINT once, at import, into `constants.ENDPOINT` (and the resolve-URL template);
    HfApi/HfFileSystem read those constants when they are created: so both the environment and the constants are
    set.
    """
    from huggingface_hub import constants

    environment = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",  # the emulator speaks LFS, not Xet
        "HF_HOME": str(home),
        "HF_TOKEN": "hf_fake_local_token",
    }
    removed = ("HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_ENABLE_HF_TRANSFER")
    values = {
        "ENDPOINT": endpoint,
        "HUGGINGFACE_CO_URL_TEMPLATE": endpoint + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_XET": True,
    }
    saved_environment = {name: os.environ.get(name) for name in (*environment, *removed)}
    saved_values = {name: getattr(constants, name) for name in values if hasattr(constants, name)}
    os.environ.update(environment)
    for name in removed:
        os.environ.pop(name, None)
    for name in saved_values:
        setattr(constants, name, values[name])
    try:
        yield
    finally:
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name, value in saved_values.items():
            setattr(constants, name, value)
