"""How to rebuild llama-cpp-python so that its AMX matmul is sound under GCC 12 (engine/llama/amx.py says why it is not).

The fix is a header that every file of the build includes first (amx_tilecfg_fix.h, beside this module): it
redeclares `_tile_loadconfig` as reading the whole tile configuration. A compiler flag, not a patch of llama.cpp's
sources, so it works on the sdist pip fetches. pip reuses a cached wheel whatever CMAKE_ARGS says, hence
--no-cache-dir. The command is the one the README's "Intel CPUs with AMX" gives; a test keeps the two the same.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

FIX_HEADER = Path(__file__).with_name("amx_tilecfg_fix.h")


def reinstall_command(pip: str, header: Path = FIX_HEADER) -> str:
    """The forced rebuild of the pinned llama-cpp-python with the fix header included in every C and C++ file."""
    version = metadata.version("llama-cpp-python")
    flags = f"-DCMAKE_C_FLAGS=-include{header} -DCMAKE_CXX_FLAGS=-include{header}"
    return f'CMAKE_ARGS="{flags}" {pip} install --force-reinstall --no-deps --no-cache-dir llama-cpp-python=={version}'
