"""The devices llama.cpp can compute on (CPU, GPUs) and their free memory, from ggml's own registry.

llama-cpp-python 0.3.36 binds llama.h only, but the ggml library it bundles
exports ggml-backend.h's device functions, so ctypes reaches them directly.
They are what llama.cpp itself asks when it splits layers across GPUs: the free
memory read here is the free memory llama.cpp will see.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import llama_cpp

from localspec.engine.llama.ggml_library import ggml_library

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
