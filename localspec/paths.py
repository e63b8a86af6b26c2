"""Where localspec keeps its files, per platform conventions (platformdirs).

One place decides every directory so that the CLI, the engine's log and the
app never disagree about where things live.
"""

from __future__ import annotations

from pathlib import Path

from platformdirs import PlatformDirs

_DIRS = PlatformDirs(appname="localspec", appauthor=False)


def config_dir() -> Path:
    return Path(_DIRS.user_config_dir)


def data_dir() -> Path:
    return Path(_DIRS.user_data_dir)


def cache_dir() -> Path:
    return Path(_DIRS.user_cache_dir)


def log_dir() -> Path:
    return Path(_DIRS.user_log_dir)


def self_draft_dir() -> Path:
    """Where `--drafter self` keeps the drafts it cuts from targets (remade at will, so a cache)."""
    return cache_dir() / "self-drafts"


def cost_cache_dir() -> Path:
    """Where auto keeps the costs it measured, per pair and machine (remeasured at will, so a cache)."""
    return cache_dir() / "costs"


def history_file() -> Path:
    """The conversations (SQLite)."""
    return data_dir() / "history.sqlite3"


def llama_log_file() -> Path:
    """llama.cpp's own log: kept out of the terminal, but never thrown away."""
    return log_dir() / "llama.log"
