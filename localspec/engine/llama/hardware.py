"""Facts about this machine that decide the engine's defaults."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from pathlib import Path

import llama_cpp


def physical_core_count() -> int:
    """Physical cores available to this process.

    llama.cpp decodes fastest with one thread per physical core: hyperthreads
    share the core's vector units and only add contention. A container's CPU
    quota counts too: on a 64-core host limited to 2 CPUs, 64 spinning threads
    would share 2 CPUs' time and decode many times slower.
    """
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        allowed = list(range(os.cpu_count() or 1))
    cores: set[tuple[str, str]] = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            cores.add(("cpu", str(cpu)))
            continue
        cores.add((package, core))
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.perflevel0.physicalcpu"], capture_output=True, text=True, check=True)
            return max(1, int(out.stdout.strip()))
        except (OSError, ValueError, subprocess.CalledProcessError):
            pass
    return max(1, min(len(cores), cgroup_cpu_limit() or len(cores)))


def cgroup_cpu_limit(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """The CPUs a cgroup v2 quota allows this process (rounded up), or None where there is no quota."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):  # no cgroup v2 file, or "max": no quota
        return None


def gpu_offload_supported() -> bool:
    """Whether this llama-cpp-python build can put layers on a GPU (CUDA, Metal, ...)."""
    return bool(llama_cpp.llama_supports_gpu_offload())
