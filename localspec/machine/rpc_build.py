"""The RPC backend module and `ggml-rpc-server`, built once from the llama.cpp that llama-cpp-python vendors.

Why a module rather than rebuilding llama-cpp-python with -DGGML_RPC=on: the README's install stays as it is (pip
caches the wheel it built, and a cached wheel ignores new CMAKE_ARGS, so a flag there is easily lost), and only a
user who wants remote devices pays: one minute for the module, a few more for the server. The module is built as a
dynamic backend (GGML_BACKEND_DL) from the very sources of the installed version, so the libggml already loaded takes
it (ggml_backend_load) and its protocol matches a server built from the same tree. The client in it is patched so
that a server lost mid-answer is an error rather than the end of the process (rpc_client_patch).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from localspec import paths
from localspec.errors import LocalspecError
from localspec.machine import llama_sources, rpc_client_patch


class RpcBuildError(LocalspecError):
    """The RPC backend could not be built here: what is missing, and what to do."""


def llama_cpp_version() -> str:
    return llama_sources.llama_cpp_version()


def build_dir() -> Path:
    return paths.cache_dir() / "rpc" / f"llama-cpp-python-{llama_cpp_version()}"


def module_path() -> Path:
    return build_dir() / "libggml-rpc.so"


def server_path() -> Path:
    return build_dir() / "ggml-rpc-server"


def _record() -> dict:
    """What the last build wrote: the protocol it speaks and the client patch it carries ({} before a build)."""
    try:
        record = json.loads((build_dir() / "build.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def protocol_version() -> tuple[int, int, int] | None:
    """The RPC protocol of the built backend (ggml-rpc.h's RPC_PROTO_*_VERSION); None before a build."""
    try:
        major, minor, patch = _record()["protocol"]
    except (KeyError, TypeError, ValueError):
        return None
    return int(major), int(minor), int(patch)


def is_built() -> bool:
    """The module and the server are there, from this version's sources, with this localspec's client patch."""
    return (module_path().is_file() and server_path().is_file() and protocol_version() is not None
            and _record().get("client_patch") == rpc_client_patch.PATCH_LEVEL)


def build(report: Callable[[str], None], sdist: Path | None = None) -> Path:
    """Build the module and the server into build_dir() (from `sdist`, or the installed version's, fetched with pip)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RpcBuildError("cmake is not installed: install it (`pip install cmake`, or your system's package) and run "
                            "`localspec rpc-build` again. A C++ compiler is needed too, as for llama-cpp-python itself.")
    version = llama_cpp_version()
    with tempfile.TemporaryDirectory(prefix="localspec-rpc-") as scratch:
        work = Path(scratch)
        if sdist is None:
            report(f"fetching the llama-cpp-python {version} sources with pip")
            sdist = llama_sources.download_sdist(version, work, RpcBuildError, "`localspec rpc-build --sdist FILE`")
        report(f"unpacking {sdist.name}")
        tree = llama_sources.unpack(sdist, work / "src", version, RpcBuildError)
        if not (tree / "ggml" / "include" / "ggml-rpc.h").is_file():
            raise RpcBuildError(f"{sdist} holds no vendored llama.cpp with an RPC backend; is it llama-cpp-python {version}'s?")
        try:
            rpc_client_patch.apply(tree)
        except rpc_client_patch.PatchError as exc:
            raise RpcBuildError(f"The RPC client in {sdist.name} is not the one localspec knows how to make fault-tolerant "
                                f"({exc}). Use llama-cpp-python {version}'s own sources.") from exc
        common = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                  "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
        report("building the RPC backend module (about a minute)")
        llama_sources.cmake_build(cmake, tree, work / "module", [*common, "-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU=OFF",
                                                                 "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TOOLS=OFF"], ["ggml-rpc"], RpcBuildError)
        report("building ggml-rpc-server (a few minutes: it carries a CPU backend to serve with)")
        llama_sources.cmake_build(cmake, tree, work / "server", [*common, "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TOOLS=ON"],
                                  ["ggml-rpc-server"], RpcBuildError)
        out = build_dir()
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "module" / "bin" / "libggml-rpc.so", module_path())
        shutil.copy2(work / "server" / "bin" / "ggml-rpc-server", server_path())
        record = {"protocol": _protocol_in(tree / "ggml" / "include" / "ggml-rpc.h"), "client_patch": rpc_client_patch.PATCH_LEVEL}
        (out / "build.json").write_text(json.dumps(record))
    return out


def _protocol_in(header: Path) -> list[int]:
    text = header.read_text()
    return [int(re.search(rf"#define RPC_PROTO_{part}_VERSION\s+(\d+)", text).group(1))  # type: ignore[union-attr]
            for part in ("MAJOR", "MINOR", "PATCH")]
