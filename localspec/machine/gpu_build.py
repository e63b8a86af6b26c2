"""A GPU the installed llama-cpp-python cannot use, and how to rebuild it so that it can.

pip builds llama.cpp for the CPU unless told otherwise, so an NVIDIA laptop
runs everything on the CPU until llama-cpp-python is rebuilt with CUDA. The GPU
is found without llama.cpp (nvidia-smi, the driver's /proc entry, the Mac's
chip), because a CPU-only build cannot see it. The commands here are the ones
the README's "GPU builds" section gives; a test keeps the two the same.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

CUDA_CMAKE_ARGS = 'CMAKE_ARGS="-DGGML_CUDA=on"'


def reinstall_command(pip: str, cuda: bool) -> str:
    """The forced rebuild of the pinned llama-cpp-python, with CUDA or (on a Mac) with its default Metal."""
    version = metadata.version("llama-cpp-python")
    command = f"{pip} install --force-reinstall --no-cache-dir llama-cpp-python=={version}"
    return f"{CUDA_CMAKE_ARGS} {command}" if cuda else command


@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    total_bytes: int | None
    free_bytes: int | None


def nvidia_gpus() -> list[NvidiaGpu]:
    """NVIDIA GPUs the driver knows, whatever llama.cpp was built with."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        gpus = []
        for line in out.splitlines():
            name, *sizes = [field.strip() for field in line.split(",")]
            mib = [int(s) * 2**20 if s.isdigit() else None for s in sizes] + [None, None]
            if name:
                gpus.append(NvidiaGpu(name, mib[0], mib[1]))
        if gpus:
            return gpus
    driver = Path("/proc/driver/nvidia/gpus")
    return [NvidiaGpu("NVIDIA GPU", None, None) for _ in driver.iterdir()] if driver.is_dir() else []


def is_apple_silicon() -> bool:
    """True under Rosetta too: an Intel Python on an M-series Mac is exactly the case that loses Metal."""
    if sys.platform != "darwin":
        return False
    if platform.machine() == "arm64":
        return True
    try:
        out = subprocess.run(["sysctl", "-n", "hw.optional.arm64"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.strip() == "1"


def unused_gpu_advice(gpu_offload: bool, system_info: str, pip: str) -> str | None:
    """What to do when this machine has a GPU that this build leaves idle; None when there is nothing to fix."""
    if gpu_offload:
        return None
    nvidia = nvidia_gpus()
    if nvidia and "CUDA" in system_info.upper():
        return ("This llama-cpp-python was built with CUDA, but CUDA finds no GPU. Check the NVIDIA driver: "
                "`nvidia-smi` must list the GPU.")
    if nvidia:
        return (f"An NVIDIA GPU is present ({nvidia[0].name}), but this llama-cpp-python was built without CUDA, "
                "so every layer runs on the CPU. Rebuild it with CUDA (it needs the CUDA toolkit, nvcc), then run "
                f"`localspec doctor` again:\n    {reinstall_command(pip, cuda=True)}")
    if is_apple_silicon():
        return ("This is an Apple Silicon Mac, but this llama-cpp-python has no Metal. Metal is built in by default, "
                "so it was built for Intel (a Python running under Rosetta) or with Metal turned off. Reinstall it "
                f"from an arm64 Python, without CMAKE_ARGS:\n    {reinstall_command(pip, cuda=False)}")
    return None
