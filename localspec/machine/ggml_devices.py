"""The devices llama.cpp can compute on (CPU, GPUs) and their free memory, from ggml's own registry.

llama-cpp-python 0.3.36 binds llama.h only, but the ggml library it bundles
exports ggml-backend.h's device functions, so ctypes reaches them directly.
They are what llama.cpp itself asks when it splits layers across GPUs: the free
memory read here is the free memory llama.cpp will see.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from pathlib import Path

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
    handle: int = field(default=0, compare=False, repr=False)  # ggml_backend_dev_t, for llama_model_params.devices

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("GPU", "iGPU")

    @property
    def is_remote(self) -> bool:
        """A ggml-rpc-server's device (--rpc): GPU-type to ggml, but on another machine."""
        return self.name.startswith("RPC")


@functools.cache
def ggml_library() -> ctypes.CDLL:
    """The libggml that libllama uses (from llama_cpp's directory, so LLAMA_CPP_LIB_PATH applies too), with the
    prototypes of the device and backend-registry functions localspec calls.

    The wheel holds libggml.so and libggml.so.0 as two files, not a link: loading the first would start a second
    ggml with a registry of its own, where an added RPC server is invisible to llama.cpp. libllama links the second.
    """
    base = Path(llama_cpp.llama_cpp._base_path)
    linked = next((base / name for name in ("libggml.so.0", "libggml.0.dylib") if (base / name).is_file()), None)
    lib = ctypes.CDLL(str(linked), mode=ctypes.RTLD_GLOBAL) if linked else load_shared_library("ggml", base)
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
    lib.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    lib.ggml_backend_load.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load.restype = ctypes.c_void_p
    lib.ggml_backend_register.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_register.restype = None
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    return lib


def backend_devices() -> list[BackendDevice]:
    """Every device the build registered, with its memory now (read afresh on each call)."""
    llama_cpp.llama_supports_gpu_offload()  # loads dynamically built backends first, as llama.cpp does before a load
    lib = ggml_library()
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
            handle=device,
        ))
    return devices
