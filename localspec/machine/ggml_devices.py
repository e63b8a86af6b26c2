"""The devices llama.cpp can compute on (CPU, GPUs) and their free memory, from ggml's own registry.

llama-cpp-python 0.3.36 binds llama.h only, but the ggml library it bundles
exports ggml-backend.h's device functions, so ctypes reaches them directly.
They are what llama.cpp itself asks when it splits layers across GPUs: the free
memory read here is the free memory llama.cpp will see.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import llama_cpp
from llama_cpp._ctypes_extensions import load_shared_library

# ggml-backend.h's enum ggml_backend_dev_type, in order
_KINDS = ("CPU", "GPU", "iGPU", "accelerator", "meta")


@dataclass(frozen=True)
class BackendDevice:
    name: str  # ggml's name: CPU, CUDA0, Metal, Vulkan0...
    description: str  # the hardware: "NVIDIA GeForce RTX 4060 Laptop GPU", "Apple M2 Pro"
    kind: str  # one of _KINDS
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("GPU", "iGPU")


@functools.cache
def _ggml() -> ctypes.CDLL:
    """The libggml that llama_cpp loaded (from the same directory, so LLAMA_CPP_LIB_PATH applies too)."""
    lib = load_shared_library("ggml", llama_cpp.llama_cpp._base_path)
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for text_function in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        text_function.argtypes = [ctypes.c_void_p]
        text_function.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_memory.restype = None
    return lib


def backend_devices() -> list[BackendDevice]:
    """Every device the build registered, with its memory now (read afresh on each call)."""
    llama_cpp.llama_supports_gpu_offload()  # loads dynamically built backends first, as llama.cpp does before a load
    lib = _ggml()
    devices = []
    for index in range(lib.ggml_backend_dev_count()):
        device = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(device)
        devices.append(BackendDevice(
            name=(lib.ggml_backend_dev_name(device) or b"").decode("utf-8", errors="replace"),
            description=(lib.ggml_backend_dev_description(device) or b"").decode("utf-8", errors="replace"),
            kind=_KINDS[kind] if 0 <= kind < len(_KINDS) else f"type {kind}",
            free_bytes=free.value,
            total_bytes=total.value,
        ))
    return devices
