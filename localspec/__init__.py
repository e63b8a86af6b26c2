"""localspec: a local runner for speculative decoding with GGUF target/draft pairs."""

import ctypes
import sys

__version__ = "0.1.0"


def _share_the_cxx_runtime() -> None:
    """Put libstdc++ in the process's global symbol scope before any llama.cpp library loads (every localspec module
    imports this package first). A CUDA build's libggml-cuda carries weak copies of libstdc++'s stream templates
    (nvcc instantiates them); libllama bound its stream calls to those copies, whose locale facet ids index past the
    process's facets, and loads died of SIGSEGV in llama_model::print_info as the heap happened to lie (issue 45).
    The global scope is searched first, so every library then binds libstdc++'s own."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:  # no libstdc++ (a musl system, say): nothing to share, and llama.cpp brings its own
            pass


_share_the_cxx_runtime()
