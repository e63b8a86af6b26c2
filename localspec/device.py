"""What the machine does with the models: backend, offloaded layers, memory in use.

The app's device line and (later) `localspec doctor` read it; it asks llama.cpp
what it was built with rather than guessing from the platform.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from localspec.engine.hardware import gpu_offload_supported


@dataclass(frozen=True)
class OffloadedLayers:
    role: str
    on_gpu: int
    total: int


def backend_name() -> str:
    """CPU, CUDA, Metal, Vulkan...: the first GPU backend llama.cpp was built with, else CPU."""
    if not gpu_offload_supported():
        return "CPU"
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").upper()
    for marker, name in (("CUDA", "CUDA"), ("METAL", "Metal"), ("VULKAN", "Vulkan"), ("HIP", "ROCm"), ("SYCL", "SYCL")):
        if marker in info:
            return name
    return "Metal" if sys.platform == "darwin" else "GPU"


def offloaded_layers(role: str, requested: int, n_layer: int) -> OffloadedLayers:
    """llama.cpp's rule: -1 (or more than the model has) puts every layer on the GPU; without offload, none."""
    if not gpu_offload_supported():
        return OffloadedLayers(role, 0, n_layer)
    on_gpu = n_layer if requested < 0 or requested >= n_layer else requested
    return OffloadedLayers(role, on_gpu, n_layer)


def resident_memory_bytes() -> int:
    """This process's resident memory now (Linux), else its peak (other platforms)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        pages = int(statm.read_text().split()[1])
        return pages * resource.getpagesize()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
