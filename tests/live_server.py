"""`localspec serve` as a user starts it: a subprocess on a free loopback port, ready once /health says so."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                raw: bytes | None = None) -> tuple[int, Any]:
        """Raw HTTP: status and the decoded JSON (or text) body."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def live_server(tmp_path: Path, *args: str, ready: bool = True) -> Iterator[LiveServer]:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "localspec", "serve", "--port", str(port), *args],
                                   stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    server = LiveServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 120
        while ready:
            assert process.poll() is None, f"the server exited: {server.log_text()}"
            try:
                if server.request("GET", "/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, f"the server never became ready: {server.log_text()}"
            time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
