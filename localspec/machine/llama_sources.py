"""The llama.cpp sources that llama-cpp-python vendors, fetched, unpacked and built with cmake: shared by the builds
localspec makes of them (rpc_build: the RPC backend; llama_build: llama.cpp's own tools and libraries).

Why the sdist: it holds the very llama.cpp tree the installed bindings were made from, so what is built from it
speaks the same C API and protocol. Each caller passes its own error class and says how to retry, so its messages
name its own command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from localspec.errors import LocalspecError


def llama_cpp_version() -> str:
    return metadata.version("llama_cpp_python")


def download_command(version: str) -> str:
    """What a user runs to fetch the sources by hand (on another machine, say, for one without network)."""
    return f"pip download --no-deps --no-binary :all: llama-cpp-python=={version}"


def download_sdist(version: str, into: Path, error: type[LocalspecError], retry: str) -> Path:
    """llama-cpp-python `version`'s source .tar.gz, fetched with pip into `into`; `retry` says how to give it instead."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(into),
               f"llama-cpp-python=={version}"]
    result = subprocess.run(command, capture_output=True, text=True)
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if result.returncode != 0 or not found:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise error(f"pip could not fetch the llama-cpp-python {version} sources ({last}). Check the network, "
                    f"or give the downloaded .tar.gz: {retry}.")
    return found[0]


def unpack(sdist: Path, into: Path, version: str, error: type[LocalspecError]) -> Path:
    """Unpack `sdist` under `into`; the vendored llama.cpp tree inside it (not checked: each build checks what it needs)."""
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise error(f"{sdist} cannot be unpacked ({exc}): give llama-cpp-python {version}'s source .tar.gz, "
                    "or leave out --sdist to let pip fetch it.") from exc
    return into / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def cmake_build(cmake: str, tree: Path, build: Path, options: Sequence[str], targets: Sequence[str], error: type[LocalspecError]) -> None:
    """Configure `tree` into `build` with `options`, then build only `targets`, on every core."""
    for step in ([cmake, "-S", str(tree), "-B", str(build), *options],
                 [cmake, "--build", str(build), "--target", *targets, "-j", str(jobs())]):
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise error(f"Building {' '.join(targets)} failed:\n{tail}\nA C++ compiler and cmake are needed, as for llama-cpp-python.")


def jobs() -> int:
    return max(1, os.cpu_count() or 1)
