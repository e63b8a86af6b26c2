"""The file a model is loaded from, checked before llama.cpp sees it: a missing file, a directory, a device or a file
that is not a GGUF gets a message that says what to do, where llama.cpp would fail opaquely. Every reader of a GGUF
(the loader, the header reader, the memory planner, make-draft) asks here, so the words are the same everywhere.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

import gguf

from localspec.engine.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: Path) -> None:
    """Fail early, with a useful message, on paths llama.cpp would reject opaquely."""
    if not path.exists():
        raise ModelLoadError(f"Model file not found: {path}. Check the path, or download the model first.")
    if path.is_dir():
        raise ModelLoadError(f"{path} is a directory, not a GGUF model file. Point to the .gguf file inside it.")
    if not path.is_file():  # /dev/null, a pipe, a socket
        raise ModelLoadError(f"{path} is not a regular file (a device, pipe or socket), so it cannot be a GGUF model. Point to a .gguf file.")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'). "
            "localspec runs llama.cpp GGUF models: download a .gguf file, or convert the model "
            "with llama.cpp's convert_hf_to_gguf.py."
        )


# GGUF value types by id: the struct format of each fixed-size one (8 is a string, 9 an array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def architecture(path: Path) -> str:
    """The file's `general.architecture` (an EAGLE-3 head's is eagle3: it is no draft model of its own); '' where the
    file cannot say, as a download cut short (the loader then says what is wrong with it). The metadata is read up to
    that key, which writers put first: gguf's whole-file reader took 7 s on the 0.5B draft, at every load."""
    check_gguf_file(path)
    try:
        with open(path, "rb") as f:
            _, _, n_kv = struct.unpack("<4xIQQ", f.read(24))
            for _ in range(n_kv):
                key = _string(f)
                kind = _unpack(f, "I")
                if key == gguf.Keys.General.ARCHITECTURE:
                    return _string(f) if kind == 8 else ""
                _skip(f, kind)
    except (struct.error, UnicodeDecodeError, KeyError):  # the file ended early, or holds what no GGUF does
        return ""
    return ""


def _unpack(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    return f.read(_unpack(f, "Q")).decode()


def _skip(f: BinaryIO, kind: int) -> None:
    """Past one value of type `kind`."""
    if kind == 8:
        f.seek(_unpack(f, "Q"), 1)
    elif kind == 9:
        item, count = _unpack(f, "I"), _unpack(f, "Q")
        if item in _SCALARS:
            f.seek(count * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(count):
                _skip(f, item)
    else:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
