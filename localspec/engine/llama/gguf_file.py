"""The file a model is loaded from, checked before llama.cpp sees it: a missing file, a directory, a device or a file
that is not a GGUF gets a message that says what to do, where llama.cpp would fail opaquely. Every reader of a GGUF
(the loader, the header reader, the memory planner, make-draft) asks here, so the words are the same everywhere.
"""

from __future__ import annotations

from pathlib import Path

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


def architecture(path: Path) -> str:
    """The file's `general.architecture` (an EAGLE-3 head's is eagle3: it is no draft model of its own); '' where the
    file cannot say, as a download cut short (the loader then says what is wrong with it)."""
    check_gguf_file(path)
    try:
        field = gguf.GGUFReader(path).fields.get(gguf.Keys.General.ARCHITECTURE)
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError):  # gguf's reader ran past the end
        return ""
    return str(field.contents()) if field is not None else ""
