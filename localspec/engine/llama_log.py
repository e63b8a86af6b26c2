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
        if _file is not None:
            _file.write(message)
            if level == _LEVEL_ERROR:
                _file.flush()
        if level == _LEVEL_ERROR and message.strip():
            _recent_errors.append(message.strip())


def install(log_file: Path | None = None) -> Path:
    """Send llama.cpp's log to `log_file` (default: the user's log directory). Idempotent."""
    global _file
    target = log_file or paths.llama_log_file()
    with _lock:
        if _file is None or Path(_file.name) != target:
            target.parent.mkdir(parents=True, exist_ok=True)
            if _file is not None:
                _file.close()
            _file = open(target, "a", encoding="utf-8", buffering=1 << 16)
    llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
    return target


def take_recent_errors() -> list[str]:
    """The error lines logged since the last call, oldest first."""
    with _lock:
        lines = list(_recent_errors)
        _recent_errors.clear()
    return lines


def log_file_path() -> Path:
    with _lock:
        return Path(_file.name) if _file is not None else paths.llama_log_file()
