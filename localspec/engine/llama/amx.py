"""llama.cpp's AMX weight buffer is kept where this build's AMX matmul is sound, and taken out where it is not.

Why it matters: on an Intel CPU with AMX (Sapphire Rapids and later) llama.cpp puts Q4_0, Q8_0, the K-quants and
the like in its AMX buffer, whose kernels make a Q8_0 target's one-token decode about 1.75x faster on 2 cores, and
a batch of 16 cost 1.9 one-token passes instead of 3.2 (see README, "Intel CPUs with AMX").

Why it is checked: that matmul loads a tile configuration with `_tile_loadconfig`, and GCC 12's header (Debian 12's
compiler) declares the instruction to read 8 bytes of the 64-byte configuration, so the compiler drops the stores
of the tile shapes and the first batch of more than one token dies of SIGSEGV (llama.cpp issue 20824). A build by
GCC 13, by clang, or with localspec's header (machine/amx_build.py) is sound.

So before the first model loads, a child process multiplies a small Q8_0 matrix through the AMX buffer (one row
and four, the two kernels llama.cpp picks between) and compares it with numpy: a child, because a miscompiled
build dies. Where it fails, AMX leaves the CPU backend's list of extra weight buffers
(`ggml_backend_dev_get_extra_bufts`, a NULL-terminated array the backend keeps for the process), and those weights
go to the next entry, the repack buffer with its AVX2/AVX-512 kernels. The verdict is kept per llama.cpp build
(its library files), so only a build's first start pays the child (about a second).

Where the verdict is sound, settling leaves this process as llama.cpp alone would: it asks nothing of ggml before
the load. Whether AMX may be on offer is read from the CPU's flags here; the build's feature list and its buffers
are read by the child. (The H200's load crash, once blamed on these early calls, had another cause: see
localspec/__init__.py.)
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from localspec import paths
from localspec.engine import json_cache
from localspec.engine.llama.ggml_library import ggml_library

_CPU_DEVICE = 0  # ggml-backend.h's GGML_BACKEND_DEVICE_TYPE_CPU
_AMX = b"AMX"
_ExtraBuffersFunction = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)

_GGML_TYPE_F32, _GGML_TYPE_Q8_0 = 0, 8
_Q8_0_BLOCK = 32  # weights per Q8_0 block: an fp16 scale, then 32 int8
_PROBE_K, _PROBE_N = 256, 32  # the smallest shape the AMX buffer takes (K a multiple of 32, N of 32)
_PROBE_ROWS = (1, 4)  # one row runs the AVX512-VNNI kernel, more the AMX tiles (the one GCC 12 breaks)
_PROBE_TOLERANCE = 0.02  # of the largest output: the kernels quantize the input to Q8_0, which costs ~0.5%
_PROBE_TIMEOUT_S = 120
_VERDICT_FORMAT = 2


@dataclass(frozen=True)
class AmxVerdict:
    """Whether this build's CPU backend offers AMX, and whether its matmul came out right here."""

    offered: bool
    sound: bool
    reason: str  # what the probe saw, for doctor


_NOT_OFFERED = AmxVerdict(offered=False, sound=False, reason="this build or CPU has no AMX buffer")


def cpu_weight_buffers() -> list[str]:
    """The names of the extra buffer types llama.cpp may place CPU weights in, in its order of preference."""
    lib = ggml_library()
    array = _extra_buffer_array()
    return [] if array is None else [lib.ggml_backend_buft_name(entry).decode() for entry in _entries(array)]


@functools.cache
def settle_amx() -> AmxVerdict:
    """Once per process, before the first model loads: keep AMX if this build's matmul is sound, else take it out."""
    verdict = amx_verdict()
    if verdict.offered and not verdict.sound:
        keep_weights_off_amx()
    return verdict


def amx_verdict() -> AmxVerdict:
    """The verdict on this build: read from the cache, or probed in a child process (and cached when conclusive).
    It asks nothing of the CPU backend in this process (the module's docstring says why)."""
    if not _cpu_reports_amx():
        return _NOT_OFFERED
    store, key = paths.cache_dir() / "amx-verdicts.json", _build_identity()
    builds = _kept_verdicts(store)
    if key in builds:
        seen = builds[key]
        return AmxVerdict(offered=bool(seen["offered"]), sound=bool(seen["sound"]), reason=str(seen["reason"]))
    verdict, conclusive = _probe_in_child()
    if conclusive:  # a probe that timed out on a busy machine is tried again next start
        builds[key] = {"offered": verdict.offered, "sound": verdict.sound, "reason": verdict.reason}
        json_cache.write_json(store, {"format": _VERDICT_FORMAT, "builds": builds})
    return verdict


def _kept_verdicts(store: Path) -> dict[str, dict]:
    """The cached verdicts by build; none from a file that is missing, unreadable or of another format."""
    try:
        kept = json.loads(store.read_text(encoding="utf-8"))
        builds = kept["builds"] if kept.get("format") == _VERDICT_FORMAT else {}
        return {key: seen for key, seen in builds.items() if isinstance(seen, dict) and {"offered", "sound", "reason"} <= seen.keys()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


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


def _amx_compiled_in() -> bool:
    """Whether the build's CPU backend has the AMX kernels: its feature list (in the child only: see the docstring)."""
    features = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" in features and "AVX512_VNNI = 1" in features  # ggml-cpu.cpp offers AMX with both


def _cpu_reports_amx() -> bool:
    """Whether the CPU (as Linux reports it) has the AMX tiles and their int8 ops; elsewhere the child finds out."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), None)
    except OSError:
        return True
    return flags is None or {"amx_tile", "amx_int8"} <= set(flags)


def _probe_in_child() -> tuple[AmxVerdict, bool]:
    """The verdict, and whether it is conclusive (the child ran to an answer or died of the build's fault). A build
    without the AMX kernels is kept as such; a child that finds them but no AMX buffer is not: the cache is per build,
    and another machine, whose kernel grants the tile data, may run the same build."""
    code = "from localspec.engine.llama import amx; amx.probe_here()"
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return AmxVerdict(True, False, f"the AMX matmul probe did not finish in {_PROBE_TIMEOUT_S} s"), False
    except OSError as exc:
        return AmxVerdict(True, False, f"the AMX matmul probe could not start ({exc})"), False
    if child.returncode < 0:
        return AmxVerdict(True, False, f"the AMX matmul dies with signal {-child.returncode} (a GCC 12 build: llama.cpp issue 20824)"), True
    try:
        answer = json.loads(child.stdout.strip().splitlines()[-1])
        if answer.get("offered") is False:
            return _NOT_OFFERED, answer.get("compiled") is False
        error = float(answer["relative_error"])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return AmxVerdict(True, False, f"the AMX matmul probe failed (exit {child.returncode}): {child.stderr.strip()[-300:]}"), True
    if not error <= _PROBE_TOLERANCE:
        return AmxVerdict(True, False, f"the AMX matmul is wrong here (relative error {error:.3g})"), True
    return AmxVerdict(True, True, f"the AMX matmul checked right (relative error {error:.1e})"), True


def probe_here() -> None:
    """In the probe's child: W (Q8_0, in the AMX buffer) times 1 and 4 input rows, against numpy; prints the error."""
    if os.name == "posix":  # a build that faults leaves no core file in the user's directory
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    llama_cpp.llama_backend_init()
    llama_cpp.llama_supports_gpu_offload()  # loads dynamically built backends first, as the engine does
    if not _amx_compiled_in():
        print(json.dumps({"offered": False, "compiled": False}))
        return
    lib = _probe_library()
    amx_buffer = _amx_entry()
    if amx_buffer is None:  # compiled in, but not offered here (the kernel refused the tile data, say)
        print(json.dumps({"offered": False, "compiled": True}))
        return
    rng = np.random.default_rng(0)
    quants = rng.integers(-64, 65, size=(_PROBE_N, _PROBE_K), dtype=np.int8)
    scale = np.float16(1 / 64)  # exact in fp16, so the reference needs no rounding
    blocks = np.zeros((_PROBE_N, _PROBE_K // _Q8_0_BLOCK), dtype=[("d", "<f2"), ("q", "i1", _Q8_0_BLOCK)])
    blocks["d"], blocks["q"] = scale, quants.reshape(_PROBE_N, -1, _Q8_0_BLOCK)
    weights = quants.astype(np.float32) * np.float32(scale)

    overhead = lib.ggml_tensor_overhead() * 8 + lib.ggml_graph_overhead()
    params = _InitParams(overhead, None, True)
    tensors, graph_context = lib.ggml_init(params), lib.ggml_init(params)
    weight_context = lib.ggml_init(params)
    w = lib.ggml_new_tensor_2d(weight_context, _GGML_TYPE_Q8_0, _PROBE_K, _PROBE_N)
    inputs = {rows: lib.ggml_new_tensor_2d(tensors, _GGML_TYPE_F32, _PROBE_K, rows) for rows in _PROBE_ROWS}
    products = {rows: lib.ggml_mul_mat(tensors, w, x) for rows, x in inputs.items()}
    cpu = lib.ggml_backend_dev_by_type(_CPU_DEVICE)
    weight_buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(weight_context, amx_buffer)
    tensor_buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(tensors, lib.ggml_backend_dev_buffer_type(cpu))
    raw = blocks.tobytes()
    lib.ggml_backend_tensor_set(w, raw, 0, len(raw))  # the AMX buffer repacks the weights here
    values = {rows: rng.standard_normal((rows, _PROBE_K)).astype(np.float32) for rows in _PROBE_ROWS}
    for rows, x in inputs.items():
        lib.ggml_backend_tensor_set(x, values[rows].ctypes.data, 0, values[rows].nbytes)
    graph = lib.ggml_new_graph(graph_context)
    for product in products.values():
        lib.ggml_build_forward_expand(graph, product)
    backend = lib.ggml_backend_dev_init(cpu, None)
    status = lib.ggml_backend_graph_compute(backend, graph)
    assert status == 0, f"graph compute status {status}"
    error = 0.0
    for rows, product in products.items():
        out = np.empty((rows, _PROBE_N), dtype=np.float32)
        lib.ggml_backend_tensor_get(product, out.ctypes.data, 0, out.nbytes)
        expected = values[rows] @ weights.T
        error = max(error, float(np.abs(out - expected).max() / np.abs(expected).max()))
    lib.ggml_backend_free(backend)
    for buffer in (weight_buffer, tensor_buffer):
        lib.ggml_backend_buffer_free(buffer)
    for context in (tensors, graph_context, weight_context):
        lib.ggml_free(context)
    print(json.dumps({"relative_error": error}))


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _probe_library() -> ctypes.CDLL:
    """libggml with the prototypes of the graph functions only the probe calls."""
    lib = ggml_library()
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    prototypes = {
        "ggml_tensor_overhead": ([], size), "ggml_graph_overhead": ([], size),
        "ggml_init": ([_InitParams], pointer), "ggml_free": ([pointer], None),
        "ggml_new_tensor_2d": ([pointer, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], pointer),
        "ggml_mul_mat": ([pointer, pointer, pointer], pointer),
        "ggml_new_graph": ([pointer], pointer), "ggml_build_forward_expand": ([pointer, pointer], None),
        "ggml_backend_alloc_ctx_tensors_from_buft": ([pointer, pointer], pointer),
        "ggml_backend_dev_buffer_type": ([pointer], pointer),
        "ggml_backend_tensor_set": ([pointer, pointer, size, size], None),
        "ggml_backend_tensor_get": ([pointer, pointer, size, size], None),
        "ggml_backend_dev_init": ([pointer, ctypes.c_char_p], pointer),
        "ggml_backend_graph_compute": ([pointer, pointer], ctypes.c_int),
        "ggml_backend_free": ([pointer], None), "ggml_backend_buffer_free": ([pointer], None),
    }
    for name, (argtypes, restype) in prototypes.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


def _build_identity() -> str:
    """What the verdict depends on: llama-cpp-python's version and its library files (a rebuild rewrites them)."""
    base = Path(llama_cpp.llama_cpp._base_path)
    files = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in base.iterdir() if "ggml" in p.name and p.is_file())
    return hashlib.sha256(f"{llama_cpp.__version__} {base.resolve()} {' '.join(files)}".encode()).hexdigest()[:24]


def _amx_entry() -> int | None:
    lib = ggml_library()
    array = _extra_buffer_array()
    return None if array is None else next((e for e in _entries(array) if lib.ggml_backend_buft_name(e) == _AMX), None)


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
    entries: list[int] = []
    while array and array[len(entries)]:
        entries.append(array[len(entries)])
    return entries
