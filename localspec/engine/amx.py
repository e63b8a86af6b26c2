"""llama.cpp's AMX weight buffer is taken out of the CPU's list before any model loads: the repack buffer serves instead.

Why: on an Intel CPU with AMX (Sapphire Rapids and later), a llama-cpp-python that pip compiled with `-march=native`
puts Q4_K, Q8_0 and the like in ggml's AMX buffer, whose batched matmul loads a tile configuration with
`_tile_loadconfig`. GCC 12's header (Debian 12's compiler) declares that instruction to read 8 bytes of the 64-byte
configuration, so the compiler drops the stores of the tile shapes, and the instruction faults on the first batch of
more than one token: the process dies with SIGSEGV while reading a prompt (llama.cpp issue 20824; PR 26954 is open).
Seen here: `localspec generate` on the real Qwen2.5-Coder pair, general protection fault in `ggml_backend_amx_mul_mat`.

Removing the AMX entry from the list that llama.cpp walks when it places CPU weights (`ggml_backend_dev_get_extra_bufts`,
a NULL-terminated array the CPU backend keeps for the process) gives those weights to the next entry, the repack buffer
with its AVX2/AVX-512 kernels: what every CPU without AMX runs. Models already loaded keep their buffers; so this runs
once, before the first load.
"""

from __future__ import annotations

import ctypes

from localspec.engine.ggml_library import ggml_library

_CPU_DEVICE = 0  # ggml-backend.h's GGML_BACKEND_DEVICE_TYPE_CPU
_AMX = b"AMX"
_ExtraBuffersFunction = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def cpu_weight_buffers() -> list[str]:
    """The names of the extra buffer types llama.cpp may place CPU weights in, in its order of preference."""
    lib = ggml_library()
    array = _extra_buffer_array()
    return [] if array is None else [lib.ggml_backend_buft_name(entry).decode() for entry in _entries(array)]


def keep_weights_off_amx() -> bool:
    """Remove AMX from the CPU's extra weight buffers (the rest keep their order); whether it was there."""
    lib = ggml_library()
    array = _extra_buffer_array()
    if array is None:
        return False
    entries = _entries(array)
    kept = [entry for entry in entries if lib.ggml_backend_buft_name(entry) != _AMX]
    for i in range(len(entries)):
        array[i] = kept[i] if i < len(kept) else None
    return len(kept) < len(entries)


def _extra_buffer_array() -> ctypes.Array | None:
    """The CPU backend's own NULL-terminated array of extra buffer types (None: a build without the function)."""
    lib = ggml_library()
    cpu = lib.ggml_backend_dev_by_type(_CPU_DEVICE)
    if not cpu:
        return None
    address = lib.ggml_backend_reg_get_proc_address(lib.ggml_backend_dev_backend_reg(cpu), b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return None
    return _ExtraBuffersFunction(address)(cpu)


def _entries(array: ctypes.Array) -> list[int]:
    entries = []
    while array and array[len(entries)]:
        entries.append(array[len(entries)])
    return entries
