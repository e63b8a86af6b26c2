"""The standard Hugging Face cache layout, so that other tools share what localspec downloads.

    <cache>/models--OWNER--NAME/blobs/<etag>                  the bytes
    <cache>/models--OWNER--NAME/snapshots/<commit>/<file>     a relative link to the blob
    <cache>/models--OWNER--NAME/refs/<revision>               the commit a branch points to

Lookups go through huggingface-hub's `try_to_load_from_cache`; only the writes
(placing a finished blob, removing a file) are ours, because our downloader keeps
its partial file across runs to resume, which huggingface-hub 2.x no longer does.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import try_to_load_from_cache

from localspec.hub.config import HubConfig


def repo_dir(config: HubConfig, repo: str) -> Path:
    return config.cache_dir / ("models--" + repo.replace("/", "--"))


def cached_path(config: HubConfig, repo: str, file: str, revision: str = "main") -> Path | None:
    found = try_to_load_from_cache(repo, file, cache_dir=config.cache_dir, revision=revision)
    return Path(found) if isinstance(found, str) else None


def blob_path(config: HubConfig, repo: str, etag: str) -> Path:
    return repo_dir(config, repo) / "blobs" / etag


def partial_path(config: HubConfig, repo: str, etag: str) -> Path:
    """Kept across runs (unlike huggingface-hub's per-process temporary files), so a pull resumes."""
    return repo_dir(config, repo) / "blobs" / f"{etag}.incomplete"


def partial_downloads(config: HubConfig, repo: str) -> list[Path]:
    """Unfinished downloads of any file of `repo` (their names carry the etag, not the file name)."""
    return sorted((repo_dir(config, repo) / "blobs").glob("*.incomplete"))


def lock_path(config: HubConfig, repo: str, etag: str) -> Path:
    """huggingface-hub's own lock file for this blob, so our download and theirs never write it at once."""
    return config.cache_dir / ".locks" / repo_dir(config, repo).name / f"{etag}.lock"


def install(config: HubConfig, repo: str, file: str, revision: str, commit: str, etag: str, finished: Path) -> Path:
    """Move a finished download into blobs/ and link it from the commit's snapshot; return the snapshot path."""
    blob = blob_path(config, repo, etag)
    os.replace(finished, blob)
    snapshot = repo_dir(config, repo) / "snapshots" / commit / file
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.unlink(missing_ok=True)
    try:
        snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    except OSError:  # no symlinks (Windows without developer mode): keep the bytes in the snapshot, as huggingface-hub does
        os.replace(blob, snapshot)
    if revision != commit:
        refs = repo_dir(config, repo) / "refs" / revision
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(commit)
    return snapshot


def size_on_disk(path: Path) -> int:
    return path.resolve().stat().st_size


def remove(config: HubConfig, repo: str, file: str) -> int:
    """Delete a cached file (its snapshot link, and its blob when no other snapshot uses it); return bytes freed."""
    snapshot = cached_path(config, repo, file)
    if snapshot is None:
        return 0
    blob = snapshot.resolve()
    size = blob.stat().st_size
    snapshot.unlink()
    if blob == snapshot:  # the bytes lived in the snapshot itself and went with it
        return size
    if blob.exists() and not _still_linked(config, repo, blob):
        blob.unlink()
        return size
    return 0


def _still_linked(config: HubConfig, repo: str, blob: Path) -> bool:
    snapshots = repo_dir(config, repo) / "snapshots"
    return any(link.is_symlink() and link.resolve() == blob for link in snapshots.rglob("*"))
