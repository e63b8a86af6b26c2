"""Resumable, verified downloads into the shared Hugging Face cache.

Why our own transfer loop, when huggingface-hub has `hf_hub_download`: since 2.x
it writes each attempt to a per-process temporary file and deletes it on failure,
so a pull that dies at 90% (Ctrl-C, a laptop lid, a dropped Wi-Fi) starts again
from zero. Here the partial file keeps a stable name next to the blob and the next
run resumes it with a `Range` request. Everything else is huggingface-hub's:
metadata, auth, endpoint, offline mode, error types, cache layout, and its lock
files, so a concurrent `hf download` of the same blob waits for us and we for it.

The sha256 is computed while the bytes arrive (the part already on disk is hashed
first when resuming) and compared with the hub's LFS hash; a mismatch removes the
file and says so.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from filelock import FileLock, Timeout
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import get_session, hf_raise_for_status

from localspec.engine.errors import ModelLoadError
from localspec.gguf.header import IncompleteGGUFError, incomplete_detail, read_local_header
from localspec.hub import cache
from localspec.hub.config import HubConfig
from localspec.hub.errors import DownloadCancelled, HashMismatchError, HubError
from localspec.hub.progress import DownloadProgress, Phase, ProgressCallback, RateMeter
from localspec.hub.remote import RemoteFile, download_headers, offline_error, remote_file, translated_errors
from localspec.units import format_bytes

CHUNK = 1 << 20
FREE_SPACE_MARGIN = 100 * 1000 * 1000  # leave room for the cache's small files and the user's own work
PROGRESS_INTERVAL_S = 0.1  # at most ten updates a second reach the UI


@dataclass(frozen=True)
class FileRequest:
    repo: str
    file: str
    revision: str = "main"

    @property
    def label(self) -> str:
        return f"{self.repo}/{self.file}"


class _Retry(Exception):
    """A transfer ended early for a reason worth another attempt (dropped connection, short body, 5xx)."""


@dataclass
class Downloader:
    config: HubConfig
    on_progress: ProgressCallback | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    retry_waits_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 8.0)
    _last_report: float = field(default=0.0, init=False)
    _hasher: hashlib._Hash = field(default_factory=hashlib.sha256, init=False)

    def pull(self, requests: list[FileRequest]) -> list[Path]:
        """Every requested file, downloaded and verified unless already cached; their paths, in order."""
        paths: dict[int, Path] = {}
        pending: list[tuple[int, RemoteFile]] = []
        for index, request in enumerate(requests):
            cached = cache.cached_path(self.config, request.repo, request.file, request.revision)
            if cached is not None:
                paths[index] = cached
                size = cached.stat().st_size
                self._report(request.label, Phase.DONE, index, len(requests), size, size, 0, None, 0.0, force=True)
            elif self.config.offline:
                raise offline_error(self.config, request.label)
            else:
                self._report(request.label, Phase.CHECKING, index, len(requests), 0, None, 0, None, 0.0, force=True)
                pending.append((index, remote_file(self.config, request.repo, request.file, request.revision)))
        self._check_free_space([remote for _, remote in pending])
        total = sum(remote.size or 0 for _, remote in pending) or None
        done_before = 0
        for index, remote in pending:
            paths[index] = self._fetch(remote, index, len(requests), done_before, total)
            size = paths[index].stat().st_size
            done_before += size
            self._report(remote.label, Phase.DONE, index, len(requests), size, size, done_before, total, 0.0, force=True)
        return [paths[i] for i in range(len(requests))]

    def _check_free_space(self, remotes: list[RemoteFile]) -> None:
        needed = 0
        for remote in remotes:
            partial = cache.partial_path(self.config, remote.repo, remote.etag)
            have = partial.stat().st_size if partial.exists() else 0
            needed += max(0, (remote.size or 0) - have)
        if not needed:
            return
        self.config.cache_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.config.cache_dir).free
        if needed + FREE_SPACE_MARGIN > free:
            raise HubError(
                f"Not enough free disk space in {self.config.cache_dir}: the download needs {format_bytes(needed)} "
                f"(plus {format_bytes(FREE_SPACE_MARGIN)} to spare) and {format_bytes(free)} is free. "
                "Free some space, or set HF_HOME to a folder on a larger disk."
            )

    def _fetch(self, remote: RemoteFile, index: int, count: int, done_before: int, total: int | None) -> Path:
        partial = cache.partial_path(self.config, remote.repo, remote.etag)
        partial.parent.mkdir(parents=True, exist_ok=True)
        lock = cache.lock_path(self.config, remote.repo, remote.etag)
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(lock, timeout=0):
                cached = cache.cached_path(self.config, remote.repo, remote.file, remote.revision)
                if cached is not None:  # another process finished it while we looked
                    return cached
                self._transfer(remote, partial, index, count, done_before, total)
                self._verify(remote, partial)
                return cache.install(self.config, remote.repo, remote.file, remote.revision, remote.commit, remote.etag, partial)
        except Timeout:
            raise HubError(f"Another download of {remote.label} is running (lock {lock}). Wait for it to finish, or stop it first.") from None
        except OSError as exc:  # hub errors arrive translated; what is left is the local disk
            raise HubError(f"Writing {partial} failed ({exc}). The partial file is kept: free space or fix permissions, then pull again.") from exc

    def _transfer(self, remote: RemoteFile, partial: Path, index: int, count: int, done_before: int, total: int | None) -> None:
        if remote.size is not None and partial.exists() and partial.stat().st_size > remote.size:
            partial.unlink()  # longer than the file itself: not a prefix of it
        self._hasher = hashlib.sha256()
        done = self._hash_existing(remote, partial, index, count, done_before, total)
        meter = RateMeter()
        failures = 0
        with open(partial, "ab") as out:
            while remote.size is None or done < remote.size:
                try:
                    done = self._stream(remote, out, done, meter, index, count, done_before, total)
                    if remote.size is None:
                        break
                    if done < remote.size:
                        raise _Retry(f"the connection closed after {done} of {remote.size} bytes")
                except _Retry as exc:
                    out.seek(0, 2)
                    if out.tell() > done:  # that attempt got further: only failures in a row count
                        failures = 0
                    done = out.tell()
                    if failures >= len(self.retry_waits_s):
                        raise HubError(
                            f"The download of {remote.label} stopped at {format_bytes(done)} of {format_bytes(remote.size or 0)} "
                            f"after {failures} retries ({exc}). The partial file is kept: run the same pull again to resume."
                        ) from None
                    self._report(remote.label, Phase.RETRYING, index, count, done, remote.size, done_before + done, total, 0.0, force=True)
                    if self.cancel.wait(self.retry_waits_s[failures]):
                        raise DownloadCancelled(f"Download of {remote.label} cancelled; run the pull again to resume.") from None
                    failures += 1

    def _hash_existing(self, remote: RemoteFile, partial: Path, index: int, count: int, done_before: int, total: int | None) -> int:
        """Resuming: hash what an earlier run left, so the final hash covers the whole file."""
        if not partial.exists():
            return 0
        done = 0
        with open(partial, "rb") as f:
            while chunk := f.read(CHUNK * 8):
                self._hasher.update(chunk)
                done += len(chunk)
                self._report(remote.label, Phase.CHECKING, index, count, done, remote.size, done_before + done, total, 0.0)
        return done

    def _stream(self, remote: RemoteFile, out, done: int, meter: RateMeter, index: int, count: int, done_before: int, total: int | None) -> int:
        headers = {**download_headers(self.config, remote), "Accept-Encoding": "identity"}
        if done:
            headers["Range"] = f"bytes={done}-"
        with translated_errors(self.config, remote.repo, remote.file):
            try:
                with get_session().stream("GET", remote.location, headers=headers, timeout=30.0, follow_redirects=True) as response:
                    try:
                        hf_raise_for_status(response)
                    except HfHubHTTPError as exc:
                        if response.status_code >= 500:
                            raise _Retry(f"HTTP {response.status_code}") from exc
                        raise
                    if done and response.status_code == 200:  # the server ignored Range: start over
                        out.seek(0)
                        out.truncate()
                        self._hasher = hashlib.sha256()
                        done = 0
                    for chunk in response.iter_bytes():  # as they arrive: a dropped connection loses nothing received
                        if self.cancel.is_set():
                            out.flush()
                            raise DownloadCancelled(f"Download of {remote.label} cancelled; run the pull again to resume.")
                        out.write(chunk)
                        self._hasher.update(chunk)
                        done += len(chunk)
                        speed = meter.add(done_before + done)
                        self._report(remote.label, Phase.DOWNLOADING, index, count, done, remote.size, done_before + done, total, speed)
            except httpx2.TransportError as exc:  # dropped mid-body, or refused: resume from what arrived
                out.flush()
                raise _Retry(str(exc) or type(exc).__name__) from exc
        out.flush()
        return done

    def _verify(self, remote: RemoteFile, partial: Path) -> None:
        if remote.size is not None and partial.stat().st_size != remote.size:
            raise HubError(f"{remote.label}: {partial.stat().st_size} bytes arrived, the hub announced {remote.size}. Run the pull again.")
        expected = remote.sha256
        actual = self._hasher.hexdigest()
        if expected is not None and actual != expected:
            partial.unlink()
            raise HashMismatchError(
                f"{remote.label} arrived damaged: its sha256 is {actual}, the hub's is {expected}. "
                "The bad file was removed. Run the pull again; if it fails the same way, a proxy or disk on the way corrupts it."
            )
        if remote.file.endswith(".gguf"):
            self._verify_gguf(remote, partial)

    @staticmethod
    def _verify_gguf(remote: RemoteFile, partial: Path) -> None:
        """The hub's checks pass for whatever was uploaded: a .gguf must also be one, holding every byte its header describes."""
        try:
            read_local_header(partial)
        except ModelLoadError as exc:
            partial.unlink()
            reason = incomplete_detail(exc.expected, exc.actual) if isinstance(exc, IncompleteGGUFError) else str(exc).replace(str(partial), "it")
            raise HubError(f"{remote.label} arrived whole, as the hub serves it, but is not a usable GGUF file ({reason}). "
                           "It was removed: the file on the hub is bad, so pick another file or repository.") from None

    def _report(self, label: str, phase: Phase, index: int, count: int, file_done: int, file_total: int | None,
                total_done: int, total_total: int | None, speed: float, force: bool = False) -> None:
        if self.on_progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < PROGRESS_INTERVAL_S:
            return
        self._last_report = now
        self.on_progress(DownloadProgress(label, phase, index + 1, count, file_done, file_total, total_done, total_total, speed))
