"""Tiny random models of any architecture llama.cpp knows, written by its own `test-llama-archs` (the vendored tree's).

tiny_models.py writes llama-architecture files by hand; the families people run now (hybrid and recurrent Qwen3.5,
LFM2, Nemotron-H, Mamba; sliding-window Gemma; MoE) have tensors only llama.cpp's own writer knows. The tool is built
once per llama.cpp version from llama-cpp-python's sources (fetched with pip) into the suite's model cache, and writes
a model of a few MB in under a second. Models written with one seed share one vocabulary, so any two make a pair.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from filelock import FileLock

from localspec.machine import llama_build, llama_sources
from tests.real_pair import models_dir

TOOL = "test-llama-archs"


class ArchBuildError(RuntimeError):
    pass


def _build_dir() -> Path:
    return models_dir() / f"{TOOL}-{llama_sources.llama_cpp_version()}"


def tool() -> Path:
    """The built tool (its shared libraries beside it), building it first if needed (3 to 6 minutes on 2 cores)."""
    out = _build_dir()
    done = out / "build.json"
    if done.exists():
        return out / TOOL
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(out.parent / f"{out.name}.lock"):
        if not done.exists():
            _build(out)
    return out / TOOL


def _build(out: Path) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise ArchBuildError("cmake is needed to build llama.cpp's test-llama-archs")
    version = llama_sources.llama_cpp_version()
    options = [o.replace("-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_TESTS=ON") for o in llama_build.build_options(cuda=False)]
    with tempfile.TemporaryDirectory(prefix="localspec-archs-") as scratch:
        work = Path(scratch)
        sdist = llama_sources.download_sdist(version, work, llama_build.LlamaBuildError, "check the network")
        tree = llama_sources.unpack(sdist, work / "src", version, llama_build.LlamaBuildError)
        llama_sources.cmake_build(cmake, tree, work / "build", options, [TOOL], llama_build.LlamaBuildError)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(work / "build" / "bin", out, symlinks=True)
    (out / "build.json").write_text(json.dumps({"version": version, "options": options}))


def write(directory: Path, arch: str, seed: int = 42) -> Path:
    """A random tiny model of `arch` (llama.cpp's name: qwen35, lfm2, nemotron_h, mamba, gemma3, qwen3moe, llama...)."""
    directory.mkdir(parents=True, exist_ok=True)
    before = set(directory.glob(f"{arch}-*.gguf"))
    subprocess.run([str(tool()), "-o", str(directory), "-a", arch, "-s", str(seed)], check=True, capture_output=True, timeout=120)
    written = sorted(set(directory.glob(f"{arch}-*.gguf")) - before) or sorted(directory.glob(f"{arch}-*.gguf"))
    if not written:
        raise ArchBuildError(f"{TOOL} wrote no model of {arch}")
    return written[0]
