"""A loopback Hugging Face hub: the protocol huggingface-hub speaks, real files, and faults on demand.

Two HTTP servers on 127.0.0.1, like the real hub and its CDN:

- the hub answers `HEAD|GET /{owner}/{repo}/resolve/{revision}/{file}` with the
  commit (`X-Repo-Commit`), the LFS sha256 (`X-Linked-Etag`), the size
  (`X-Linked-Size`) and a 302 to the CDN; missing repos, files and revisions and
  gated repos get the hub's status codes and `X-Error-Code` headers;
- the CDN serves `/blobs/{sha256}` with `Range` support.

Faults are armed per file: cut the connection after N bytes, corrupt a byte,
answer an HTTP status, or trickle the bytes slowly (to interrupt a pull from
outside). Every request is logged, so tests can assert that a resume asked for
a `Range` and that a token reached only the hub.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")
_BLOB = re.compile(r"^/blobs/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1 << 20


@dataclass
class Served:
    path: Path | None
    data: bytes | None
    size: int
    sha256: str

    def read(self, start: int, end: int) -> bytes:
        if self.data is not None:
            return self.data[start:end]
        assert self.path is not None
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)


@dataclass
class Fault:
    kind: str  # "cut" | "corrupt" | "status" | "slow"
    times: int = 1  # how many requests it hits; -1 = every one
    after_bytes: int = 0  # cut: bytes this response sends before the drop; corrupt: the file offset flipped
    status: int = 500
    bytes_per_second: int = 0  # slow
    skip: int = 0  # requests let through untouched before the fault starts


@dataclass
class LoggedRequest:
    server: str  # "hub" | "cdn"
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class LoopbackHub:
    repos: dict[str, dict[str, Served]] = field(default_factory=dict)
    commits: dict[str, str] = field(default_factory=dict)
    gated: dict[str, str] = field(default_factory=dict)  # repo -> the token that has accepted its license
    faults: dict[str, list[Fault]] = field(default_factory=dict)  # sha256 or "repo/file" -> faults
    log: list[LoggedRequest] = field(default_factory=list)
    _servers: list[ThreadingHTTPServer] = field(default_factory=list)

    # --- content ---------------------------------------------------------------------------

    def add_file(self, repo: str, file: str, *, path: Path | None = None, data: bytes | None = None,
                 sha256: str | None = None, size: int | None = None) -> Served:
        """Serve a real file (path) or bytes. `sha256`/`size` may be given to skip hashing, or to lie."""
        if path is not None:
            real_size = path.stat().st_size
            digest = sha256 or _hash_file(path)
        else:
            assert data is not None
            real_size = len(data)
            digest = sha256 or hashlib.sha256(data).hexdigest()
        served = Served(path, data, size if size is not None else real_size, digest)
        self.repos.setdefault(repo, {})[file] = served
        self.commits.setdefault(repo, hashlib.sha1(repo.encode()).hexdigest())
        return served

    def gate(self, repo: str, token: str) -> None:
        self.gated[repo] = token

    def fail(self, target: str, fault: Fault) -> None:
        """Arm a fault for a blob (its sha256) or for a hub path ("repo/file")."""
        self.faults.setdefault(target, []).append(fault)

    def requests(self, server: str | None = None, method: str | None = None) -> list[LoggedRequest]:
        return [r for r in self.log if (server is None or r.server == server) and (method is None or r.method == method)]

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> LoopbackHub:
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, role))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def _take_fault(self, key: str, kinds: tuple[str, ...]) -> Fault | None:
        for fault in self.faults.get(key, []):
            if fault.kind in kinds and fault.times != 0:
                if fault.skip > 0:
                    fault.skip -= 1
                    continue
                if fault.times > 0:
                    fault.times -= 1
                return fault
        return None


def _hash_file(path: Path) -> str:
    sidecar = path.with_suffix(".sha256")  # the real-model cache keeps its verified hash beside each file
    if sidecar.exists():
        return sidecar.read_text().split()[0]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 8):
            digest.update(chunk)
    return digest.hexdigest()


def _handler(hub: LoopbackHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet: the log list is the record
            pass

        def do_HEAD(self) -> None:
            self._serve(send_body=False)

        def do_GET(self) -> None:
            self._serve(send_body=True)

        def _serve(self, send_body: bool) -> None:
            hub.log.append(LoggedRequest(role, self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization")))
            if role == "hub":
                self._resolve()
            else:
                self._blob(send_body)

        def _reply(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            if commit:
                headers["X-Repo-Commit"] = commit
            self._reply(status, headers, message.encode())

        def _resolve(self) -> None:
            match = _RESOLVE.match(self.path)
            if match is None:
                return self._error(404, None, "Not a resolve URL")
            repo, revision, file = match["repo"], match["revision"], match["file"]
            fault = hub._take_fault(f"{repo}/{file}", ("status",))
            if fault is not None:
                return self._error(fault.status, None, f"Injected {fault.status}")
            if repo not in hub.repos:
                return self._error(401, "RepoNotFound", "Repository not found")
            if repo in hub.gated and self.headers.get("Authorization") != f"Bearer {hub.gated[repo]}":
                status = 401 if self.headers.get("Authorization") is None else 403
                return self._error(status, "GatedRepo", f"Access to model {repo} is restricted. You must have access to it and be authenticated to access it.")
            commit = hub.commits[repo]
            if revision not in ("main", commit):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            served = hub.repos[repo].get(file)
            if served is None:
                return self._error(404, "EntryNotFound", f"{file} does not exist at {revision}", commit)
            self._reply(302, {
                "Location": f"{hub.cdn}/blobs/{served.sha256}",
                "X-Repo-Commit": commit,
                "X-Linked-Etag": f'"{served.sha256}"',
                "X-Linked-Size": str(served.size),
                "ETag": f'"{hashlib.sha1(served.sha256.encode()).hexdigest()}"',
            })

        def _blob(self, send_body: bool) -> None:
            match = _BLOB.match(self.path)
            served = next((s for files in hub.repos.values() for s in files.values() if match and s.sha256 == match["sha"]), None)
            if served is None:
                return self._error(404, None, "No such blob")
            fault = hub._take_fault(served.sha256, ("status",))
            if fault is not None:
                return self._error(fault.status, None, f"Injected {fault.status}")
            start, end = 0, served.size
            status = 200
            range_header = self.headers.get("Range")
            if range_header:
                parsed = _RANGE.match(range_header)
                if parsed is None or int(parsed[1]) >= served.size:
                    return self._reply(416, {"Content-Range": f"bytes */{served.size}"})
                start = int(parsed[1])
                end = min(served.size, int(parsed[2]) + 1) if parsed[2] else served.size
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{served.sha256}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{served.size}")
            self.end_headers()
            if send_body:
                self._send_body(served, start, end)

        def _send_body(self, served: Served, start: int, end: int) -> None:
            cut = hub._take_fault(served.sha256, ("cut",))
            corrupt = hub._take_fault(served.sha256, ("corrupt",))
            slow = hub._take_fault(served.sha256, ("slow",))
            position = start
            while position < end:
                step = min(CHUNK, end - position)
                if slow is not None:
                    step = min(step, max(1, slow.bytes_per_second // 20))
                if cut is not None:
                    step = min(step, max(0, start + cut.after_bytes - position))
                    if step == 0:  # the connection drops mid-body
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                data = bytearray(served.read(position, position + step))
                if corrupt is not None and position <= corrupt.after_bytes < position + step:
                    data[corrupt.after_bytes - position] ^= 0xFF
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return
                position += step
                if slow is not None:
                    time.sleep(step / slow.bytes_per_second)

    return Handler
