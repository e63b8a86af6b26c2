"""A file on the hub: what the hub says about it, and its first bytes by range request.

The hub answers a HEAD on `/{repo}/resolve/{revision}/{file}` with the commit, the
LFS sha256 (as the linked ETag), the size, and where the bytes are served (a CDN
redirect, or the same URL). Header-only pair checks read just the front of that
location with `Range` requests, so a mismatched pair is refused before gigabytes
arrive. Errors are translated here, once, into messages that say what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx2  # huggingface-hub's own HTTP client: its transport errors are what a dropped connection raises
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session, hf_raise_for_status

from localspec.gguf.header import GGUFHeader, read_header
from localspec.hub.config import HubConfig
from localspec.hub.errors import HubError, HubUnreachableError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    file: str
    revision: str
    url: str  # the resolve URL on the hub
    location: str  # where the bytes are served: a CDN after a redirect, or the URL itself
    size: int | None
    etag: str
    commit: str

    @property
    def label(self) -> str:
        return f"{self.repo}/{self.file}"

    @property
    def sha256(self) -> str | None:
        """The LFS hash, which the hub sends as the linked ETag of large files."""
        return self.etag if _SHA256.match(self.etag) else None


def offline_error(config: HubConfig, label: str) -> HubError:
    return HubUnreachableError(
        f"HF_HUB_OFFLINE is set and {label} is not in the Hugging Face cache at {config.cache_dir}. "
        "Unset HF_HUB_OFFLINE to download it, or pick a pair that is already downloaded (`localspec list`)."
    )


@contextmanager
def translated_errors(config: HubConfig, repo: str, file: str) -> Iterator[None]:
    """huggingface-hub's and the network's exceptions, as HubErrors that name the repo and the remedy."""
    page = config.repo_page(repo)
    try:
        yield
    except GatedRepoError as exc:
        raise HubError(
            f"{repo} is a gated repository and this account has no access to it. Open {page} while logged in, "
            "accept its license, then set HF_TOKEN to a token of that account (https://huggingface.co/settings/tokens)."
        ) from exc
    except RepositoryNotFoundError as exc:
        raise HubError(
            f"{repo} was not found on the hub ({config.endpoint}). Check the repository id; "
            "if it is private or gated, set HF_TOKEN to a token that can read it."
        ) from exc
    except RevisionNotFoundError as exc:
        raise HubError(f"{repo} has no revision named in the request. Check the revision at {page}.") from exc
    except RemoteEntryNotFoundError as exc:
        raise HubError(f"{repo} has no file {file}. See the repository's files at {page}/tree/main and fix the name.") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise HubError(
                f"The hub refused {repo}/{file} (HTTP {status}). If the repository is gated, accept its license at {page} "
                "and set HF_TOKEN to a token of that account; if it is private, the token needs read access."
            ) from exc
        raise HubError(f"The hub answered HTTP {status} for {repo}/{file}. Try again later; if it persists, check {page}.") from exc
    except (httpx2.TransportError, ConnectionError) as exc:
        raise HubUnreachableError(
            f"Cannot reach the hub at {config.endpoint} for {repo}/{file} ({exc}). "
            "Check the network connection, or set HF_HUB_OFFLINE=1 to work with downloaded models only."
        ) from exc


def remote_file(config: HubConfig, repo: str, file: str, revision: str = "main") -> RemoteFile:
    if config.offline:
        raise offline_error(config, f"{repo}/{file}")
    url = hf_hub_url(repo, file, revision=revision, endpoint=config.endpoint)
    with translated_errors(config, repo, file):
        meta = get_hf_file_metadata(url, token=config.token, endpoint=config.endpoint)
    if not meta.commit_hash or not meta.etag:
        raise HubError(f"{config.endpoint} answered for {repo}/{file} without the hub's commit and ETag headers: is HF_ENDPOINT a Hugging Face hub?")
    return RemoteFile(repo, file, revision, url, meta.location, meta.size, meta.etag, meta.commit_hash)


def download_headers(config: HubConfig, remote: RemoteFile) -> dict[str, str]:
    """The hub's headers, without the token when the bytes come from another host (a signed CDN URL)."""
    headers = config.headers()
    if _origin(remote.location) != _origin(remote.url):
        headers.pop("authorization", None)
        headers.pop("Authorization", None)
    return headers


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = urlparse(url)
    return parsed.scheme, parsed.hostname or "", parsed.port


class RangeReader:
    """`read(n)` over HTTP: each call fetches the next n bytes of the remote file with one range request."""

    def __init__(self, config: HubConfig, remote: RemoteFile) -> None:
        self.config = config
        self.remote = remote
        self.offset = 0
        self.requests = 0
        self._headers = download_headers(config, remote)

    def read(self, n: int) -> bytes:
        if self.remote.size is not None:
            n = min(n, self.remote.size - self.offset)
        if n <= 0:
            return b""
        headers = {**self._headers, "Range": f"bytes={self.offset}-{self.offset + n - 1}", "Accept-Encoding": "identity"}
        data = bytearray()
        with translated_errors(self.config, self.remote.repo, self.remote.file):
            with get_session().stream("GET", self.remote.location, headers=headers, timeout=TIMEOUT_S, follow_redirects=True) as response:
                hf_raise_for_status(response)
                if response.status_code != 206 and self.offset > 0:
                    raise HubError(f"{self.remote.location} ignores range requests, so its header cannot be read on its own.")
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= n:
                        break
        self.requests += 1
        self.offset += min(n, len(data))
        return bytes(data[:n])


def read_remote_header(config: HubConfig, remote: RemoteFile) -> tuple[GGUFHeader, int]:
    """The GGUF header of a hub file, and how many range requests it took."""
    reader = RangeReader(config, remote)
    header = read_header(reader.read, remote.label)
    return header, reader.requests
