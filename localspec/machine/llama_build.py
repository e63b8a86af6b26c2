"""llama.cpp's own libraries and tools (llama-bench, llama-speculative-simple, llama-quantize), built once from the
llama.cpp that llama-cpp-python vendors, into localspec's cache.

Why: measuring localspec against llama.cpp is fair only when both run the same llama.cpp, built the same way. The pip
wheel carries no tools, and on a GPU machine it is often a CPU build; this one is built for this machine (native CPU
code, CUDA on request) and its libllama can also stand in for the wheel's through LLAMA_CPP_LIB_PATH, so localspec
and llama.cpp's tools run the very same kernels. Only the four targets needed are built (3 to 8 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from localspec import paths
from localspec.errors import LocalspecError
from localspec.machine import amx_build, llama_sources

TOOLS = ("llama-bench", "llama-speculative-simple", "llama-quantize")
_BUILD_FORMAT = 1  # raise when the options below change: an older build is then rebuilt


class LlamaBuildError(LocalspecError):
    """llama.cpp's tools could not be built here: what is missing, and what to do."""


def build_dir(cuda: bool) -> Path:
    return paths.cache_dir() / "llama-build" / f"llama-cpp-python-{llama_sources.llama_cpp_version()}-{'cuda' if cuda else 'cpu'}"


def _record(cuda: bool) -> dict:
    try:
        record = json.loads((build_dir(cuda) / "build.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def is_built(cuda: bool) -> bool:
    """A finished build of this version with these options: build.json is written last, after every file is in place."""
    out = build_dir(cuda)
    record = _record(cuda)
    return (record.get("version") == llama_sources.llama_cpp_version() and record.get("format") == _BUILD_FORMAT
            and record.get("cuda") == cuda and (out / "libllama.so").exists() and all((out / tool).is_file() for tool in TOOLS))


def ensure_built(report: Callable[[str], None], cuda: bool = False, sdist: Path | None = None) -> Path:
    """Build (unless is_built) and return the bin dir that holds libllama.so, libggml*.so (usable as LLAMA_CPP_LIB_PATH)
    and the tools llama-bench, llama-speculative-simple, llama-quantize."""
    out = build_dir(cuda)
    if is_built(cuda):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(out.parent / f"{out.name}.lock"):  # two processes asking at once: the second waits, then finds it built
        if not is_built(cuda):
            _build(report, cuda, sdist, out)
    return out


def _build(report: Callable[[str], None], cuda: bool, sdist: Path | None, out: Path) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise LlamaBuildError("cmake is not installed: install it (`pip install cmake`, or your system's package). "
                              "A C++ compiler is needed too, as for llama-cpp-python itself.")
    if cuda and shutil.which("nvcc") is None:
        raise LlamaBuildError("A CUDA build needs the CUDA toolkit's compiler, nvcc, on the PATH; build for the CPU instead, or install it.")
    version = llama_sources.llama_cpp_version()
    with tempfile.TemporaryDirectory(prefix="localspec-llama-") as scratch:
        work = Path(scratch)
        if sdist is None:
            report(f"fetching the llama-cpp-python {version} sources with pip")
            sdist = llama_sources.download_sdist(version, work, LlamaBuildError,
                                                 f"`{llama_sources.download_command(version)}`, then pass the file as --sdist")
        report(f"unpacking {sdist.name}")
        tree = llama_sources.unpack(sdist, work / "src", version, LlamaBuildError)
        if not (tree / "CMakeLists.txt").is_file():
            raise LlamaBuildError(f"{sdist} holds no vendored llama.cpp; is it llama-cpp-python {version}'s source .tar.gz?")
        options = build_options(cuda)
        report(f"building llama.cpp {'with CUDA' if cuda else 'for the CPU'}: {', '.join(TOOLS)} and the libraries "
               f"(3 to 8 minutes on 2 cores{'; CUDA kernels take longer' if cuda else ''})")
        llama_sources.cmake_build(cmake, tree, work / "build", options, ["llama", *TOOLS], LlamaBuildError)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(work / "build" / "bin", out, symlinks=True)  # keeps libggml.so -> libggml.so.0 -> ... as links
        record = {"version": version, "format": _BUILD_FORMAT, "cuda": cuda, "options": options}
        (out / "build.json").write_text(json.dumps(record, indent=1))


def build_options(cuda: bool) -> list[str]:
    """cmake's options. RPATH $ORIGIN: the tools find the libraries beside them once copied out of the build tree."""
    options = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF", "-DGGML_NATIVE=ON", "-DCMAKE_BUILD_RPATH=$ORIGIN"]
    if cuda:
        # Flash attention's kernels are most of a CUDA build's time (3 minutes on 16 cores without them); llama.cpp's
        # auto setting, localspec's, then runs without flash attention.
        options += ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=OFF", "-DCMAKE_CUDA_ARCHITECTURES=native"]
    if _needs_amx_fix():
        fix = amx_build.FIX_HEADER
        options += [f"-DCMAKE_C_FLAGS=-include{fix}", f"-DCMAKE_CXX_FLAGS=-include{fix}"]
    return options


def _needs_amx_fix() -> bool:
    """x86 with a GCC older than 13: its AMX tile-config intrinsic is miscompiled (engine/llama/amx.py), and a native build
    on an AMX CPU then dies on its first batch. The header costs nothing where AMX is off."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    compiler = shlex.split(os.environ.get("CXX", "")) or [shutil.which("c++") or "g++"]  # the one cmake will pick
    try:
        macros = subprocess.run([*compiler, "-dM", "-E", "-x", "c++", "-"], input="", capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    gnu = re.search(r"#define __GNUC__ (\d+)", macros)
    return gnu is not None and "__clang__" not in macros and int(gnu.group(1)) < 13
