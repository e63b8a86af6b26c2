"""The libggml that libllama uses, with the prototypes of the ggml-backend.h functions localspec calls.

llama-cpp-python 0.3.36 binds llama.h only, but the ggml library it bundles exports ggml-backend.h's device,
registry and buffer-type functions, so ctypes reaches them directly. The engine needs them (which CPU weight
buffers llama.cpp may use), and so does the machine layer (devices, RPC servers).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import llama_cpp
from llama_cpp._ctypes_extensions import load_shared_library


@functools.cache
def ggml_library() -> ctypes.CDLL:
    """The libggml that libllama uses (llama_cpp's, so LLAMA_CPP_LIB_PATH applies too), with the prototypes of the
    device and backend-registry functions localspec calls.

    Its functions are looked up through libllama's own handle, which searches libllama and the libraries it links:
    so they are those of the very libggml libllama loaded, and nothing is loaded or made global. Opening a libggml by
    path could load a second ggml with a registry of its own, where an added RPC server is invisible to llama.cpp: the
    wheel holds libggml.so and libggml.so.0 as two files, and a copied build's libllama may find its libggml in the
    build tree its RUNPATH names. Where the handle does not search dependencies (Windows), the file is opened as before.
    """
    llama = llama_cpp.llama_cpp._lib
    lib = ctypes.CDLL(llama._name, handle=llama._handle)
    if not hasattr(lib, "ggml_backend_dev_by_type"):
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
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    lib.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_buft_name.restype = ctypes.c_char_p
    return lib
