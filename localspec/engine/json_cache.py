"""A cache file written whole or not at all: what auto's cost table and the AMX verdicts are kept in.

Two processes (the app and a server, say) may write the same file; each writes its own temporary file and renames
it over the old one, so a reader sees one complete version or the other, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """Atomically; a cache that cannot be written only means measuring again next time."""
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
        temporary.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
