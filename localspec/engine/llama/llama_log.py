"""Routes llama.cpp's own log to a file instead of the terminal.

llama.cpp prints hundreds of lines on every load; they belong in a file the
user can read when something goes wrong, not over the chat. The last error
lines are also kept in memory so that a failed load can say *why* it failed.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from pathlib import Path
from typing import TextIO

import llama_cpp

from localspec import paths

_LEVEL_ERROR = 4  # ggml.h, enum ggml_log_level (3 is WARN)
_LEVEL_CONT = 5
# Each load writes about 400 KB: past this size the log is rotated (llama.log.1 ... .3 keep the older ones).
ROTATE_BYTES = 4 * 2**20
KEEP_OLD = 3

_lock = threading.Lock()
_file: TextIO | None = None
_recent_errors: collections.deque[str] = collections.deque(maxlen=8)
_last_level = 0


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _last_level
    message = text.decode("utf-8", errors="replace")
    if level == _LEVEL_CONT:
        level = _last_level
    _last_level = level
    with _lock:
        # At interpreter exit the file may be closed before the last model is freed, and llama.cpp logs the free: a
        # write then would print "Exception ignored ... I/O operation on closed file" over the user's terminal.
        if _file is not None and not _file.closed:
            _file.write(message)
            if level == _LEVEL_ERROR:
                _file.flush()
        if level == _LEVEL_ERROR and message.strip():
            _recent_errors.append(message.strip())


def install(log_file: Path | None = None) -> Path:
    """Send llama.cpp's log to `log_file` (default: the user's log directory), rotated when large. Idempotent.

    A log that cannot be written (a read-only folder) is not a reason to refuse a model: the lines are dropped.
    """
    global _file
    target = log_file or paths.llama_log_file()
    with _lock:
        if _file is None or Path(_file.name) != target:
            if _file is not None:
                _file.close()
            _file = _open(target)
    llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
    return target


def _open(target: Path) -> TextIO | None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return open(target, "a", encoding="utf-8", buffering=1 << 16)
    except OSError:
        return None


def _rotate(target: Path) -> None:
    """llama.log -> llama.log.1 -> ... -> llama.log.KEEP_OLD (the oldest goes)."""
    for index in range(KEEP_OLD - 1, 0, -1):
        older = target.with_name(f"{target.name}.{index}")
        if older.exists():
            older.replace(target.with_name(f"{target.name}.{index + 1}"))
    target.replace(target.with_name(f"{target.name}.1"))


def rotate_if_large() -> None:
    """Called before each load: a long session (the server, the app switching pairs) keeps the log bounded."""
    global _file
    with _lock:
        if _file is None:
            return
        target = Path(_file.name)
        try:
            if target.stat().st_size < ROTATE_BYTES:
                return
            _file.close()
            _rotate(target)
        except OSError:
            pass
        _file = _open(target)


def take_recent_errors() -> list[str]:
    """The error lines logged since the last call, oldest first."""
    with _lock:
        lines = list(_recent_errors)
        _recent_errors.clear()
    return lines


def log_file_path() -> Path:
    with _lock:
        return Path(_file.name) if _file is not None else paths.llama_log_file()
