"""What the machine offers the models and what it does with them: backend, GPUs, RAM, offloaded layers.

The memory planner, the app's device line, `generate --json`, the bench's JSON
and `localspec doctor` all read it. It asks llama.cpp what it was built with
and what its devices hold, rather than guessing from the platform.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from localspec.engine.llama.hardware import gpu_offload_supported, physical_core_count
from localspec.machine.ggml_devices import BackendDevice, backend_devices
from localspec.machine.memory_plan import DeviceMemory

if TYPE_CHECKING:
    from localspec.engine.engine import Engine
    from localspec.engine.llama.model import Model


@dataclass(frozen=True)
class OffloadedLayers:
    role: str
    on_gpu: int
    total: int  # llama.cpp's count: the repeating blocks and the output layer


def llama_system_info() -> str:
    """llama.cpp's own account of its build: CPU features, and the GPU backends compiled in."""
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip().rstrip("|").strip()


def backend_name(devices: list[BackendDevice] | None = None) -> str:
    """CPU, CUDA, Metal, Vulkan...: the first GPU backend llama.cpp was built with, else CPU (`devices`: those already
    read, so that an RPC server's memory is not asked for again)."""
    if not gpu_offload_supported():
        return "CPU"
    if all(device.is_remote for device in devices or backend_devices() if device.is_gpu):
        return "RPC"  # a CPU build whose only GPU-type devices are ggml-rpc-servers (--rpc)
    info = llama_system_info().upper()
    for marker, name in (("CUDA", "CUDA"), ("METAL", "Metal"), ("VULKAN", "Vulkan"), ("HIP", "ROCm"), ("SYCL", "SYCL")):
        if marker in info:
            return name
    return "Metal" if sys.platform == "darwin" else "GPU"


def offloaded_layers(model: Model) -> OffloadedLayers:
    """What llama.cpp did with a loaded model's n_gpu_layers: -1 or more than it has puts all on the GPU; without offload, none."""
    total = model.n_layer + 1
    if not gpu_offload_supported():
        return OffloadedLayers(model.role, 0, total)
    requested = model.config.resolved_gpu_layers()
    return OffloadedLayers(model.role, total if requested < 0 else min(requested, total), total)


def resident_memory_bytes() -> int:
    """This process's resident memory now (Linux), else its peak (other platforms)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        pages = int(statm.read_text().split()[1])
        return pages * resource.getpagesize()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def ram_bytes(devices: list[BackendDevice]) -> tuple[int | None, int | None]:
    """(available, total) system memory. Available counts reclaimable page cache, as the kernel does."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        values = {}
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.split():
                values[key] = int(rest.split()[0]) * 1024
        return values.get("MemAvailable"), values.get("MemTotal")
    cpu = next((d for d in devices if d.kind == "CPU"), None)
    total = cpu.total_bytes if cpu is not None else None
    if sys.platform == "win32":  # ggml's CPU device reports Windows' available physical memory
        return (cpu.free_bytes if cpu is not None else None), total
    if sys.platform == "darwin":
        return _macos_available_bytes(), total
    return None, total


def _macos_available_bytes() -> int | None:
    """Free, inactive, speculative and purgeable pages (vm_stat): what macOS can hand out without swapping."""
    try:
        out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    page = re.search(r"page size of (\d+) bytes", out)
    pages = [int(n) for n in re.findall(r"Pages (?:free|inactive|speculative|purgeable):\s+(\d+)", out)]
    return int(page[1]) * sum(pages) if page and pages else None


@dataclass(frozen=True)
class MachineInfo:
    backend: str
    gpu_offload: bool
    devices: list[BackendDevice]
    physical_cores: int
    logical_cores: int
    ram_available: int | None
    ram_total: int | None
    llama_system_info: str

    @property
    def gpus(self) -> list[BackendDevice]:
        return [d for d in self.devices if d.is_gpu]

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["gpus"] = [asdict(d) for d in self.gpus]
        del record["devices"]
        return record


def machine_info() -> MachineInfo:
    devices = backend_devices()
    available, total = ram_bytes(devices)
    return MachineInfo(backend_name(devices), gpu_offload_supported(), devices, physical_core_count(), os.cpu_count() or 1,
                       available, total, llama_system_info())


def device_memory(info: MachineInfo | None = None) -> DeviceMemory:
    """What the planner may use now: the GPUs' free memory (summed: llama.cpp splits layers by it) and available RAM."""
    info = info or machine_info()
    if not info.gpu_offload:
        return DeviceMemory(None, info.ram_available)
    gpus = info.gpus
    if not any(d.total_bytes for d in gpus):  # a backend that cannot tell: llama.cpp then counts host memory, and so do we
        return DeviceMemory(info.ram_available, info.ram_available, unified=True)
    unified = sys.platform == "darwin" or all(d.kind == "iGPU" for d in gpus)
    return DeviceMemory(sum(d.free_bytes for d in gpus), info.ram_available, unified)


def device_record(engine: Engine) -> dict[str, Any]:
    """The machine, and the layers llama.cpp put on the GPU: what `generate --json` and the bench's JSON record."""
    models = [m for m in (engine.target, engine.draft) if m is not None]
    return machine_info().to_dict() | {"offloaded": [asdict(offloaded_layers(m)) for m in models]}
