"""`localspec doctor`: what localspec sees on this machine, and what to fix.

Versions and llama.cpp's build, the backend and its GPUs, cores and RAM, where
localspec keeps its files, and which pairs are downloaded, with the memory plan
each would load with. It loads no model and changes no file but a cache: on a CPU with AMX,
the first look at a build checks its AMX matmul in a child process and keeps the verdict.
"""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata

from localspec import __version__, paths
from localspec.catalog.models_toml import load_catalog, user_catalog_path
from localspec.catalog.pair_files import download_status, pair_states
from localspec.cli.clean import describe_caches
from localspec.engine import defaults
from localspec.engine.llama import amx
from localspec.errors import LocalspecError
from localspec.gguf.header import read_local_header
from localspec.gguf.memory_kind import memory_kind
from localspec.gguf.summary import ModelSummary
from localspec.hub.config import HubConfig
from localspec.machine import amx_build, cpu_load, rpc, rpc_build
from localspec.machine.device import MachineInfo, device_memory, machine_info
from localspec.machine.gpu_build import nvidia_gpus, unused_gpu_advice
from localspec.machine.memory_plan import DeviceMemory, plan_pair
from localspec.session import plain_speed
from localspec.session.settings import settings_path
from localspec.units import format_bytes

BUSY_CPUS = 0.5  # other programs' use worth a word: from half a CPU, a pass takes a thread fewer (engine/llama/cpu_share.py)


def _row(label: str, value: str, indent: int = 2) -> None:
    print(f"{'':{indent}}{label:<20}{value}")


def _memory(free: int | None, total: int | None, free_word: str = "available") -> str:
    if free is None:
        return f"{format_bytes(total)} in all" if total else "unknown"
    return f"{format_bytes(free)} {free_word}" + (f" of {format_bytes(total)}" if total else "")


def _print_software(info: MachineInfo) -> None:
    print("Software")
    _row("localspec", __version__)
    _row("Python", f"{platform.python_version()} ({sys.executable})")
    _row("llama-cpp-python", metadata.version("llama-cpp-python"))
    _row("llama.cpp build", info.llama_system_info)


def _print_hardware(info: MachineInfo, verdict: amx.AmxVerdict) -> None:
    print("Hardware")
    _row("backend", info.backend if info.gpu_offload else "CPU (this build has no GPU offload: every layer runs on the CPU)")
    for gpu in info.gpus:
        _row(gpu.name, f"{gpu.description}: {_memory(gpu.free_bytes, gpu.total_bytes, 'free')}")
    if not info.gpus:
        unused = [] if info.gpu_offload else nvidia_gpus()
        _row("GPUs", "none that llama.cpp can use" + "".join(
            f"; {g.name} ({_memory(g.free_bytes, g.total_bytes, 'free')}, seen by the driver)" for g in unused))
    cpu = next((f", {d.description}" for d in info.devices if d.kind == "CPU"), "")
    _row("CPU cores", f"{info.physical_cores} physical ({info.logical_cores} logical){cpu}")
    _row("RAM", _memory(info.ram_available, info.ram_total))
    busy = cpu_load.busy_cores()
    if busy is not None:
        _row("CPU in use", f"{busy:.1f} of {info.logical_cores} CPUs by other programs now" + (
            ": localspec takes a thread fewer for each CPU they hold, and decodes slower until they finish" if busy >= BUSY_CPUS else ""))
    if verdict.offered:
        _row("AMX", f"used: {verdict.reason}" if verdict.sound else f"not used: {verdict.reason}")


def _amx_advice(verdict: amx.AmxVerdict, pip: str) -> str | None:
    """How to get AMX back where this build's AMX matmul is broken; None where it works or is absent."""
    if not verdict.offered or verdict.sound:
        return None
    return ("This CPU has AMX, but this llama-cpp-python's AMX matmul is broken, so localspec runs the AVX-512 kernels. "
            "AMX makes a Q8_0 target decode much faster (see the README's \"Intel CPUs with AMX\"). "
            f"Rebuild llama-cpp-python with localspec's fix:\n  {amx_build.reinstall_command(pip)}")


def _print_paths(hub: HubConfig) -> None:
    print("Paths")
    _row("settings", str(settings_path()))
    _row("your pairs", str(user_catalog_path()))
    _row("conversations", str(paths.history_file()))
    _row("cache", f"{paths.cache_dir()}: {describe_caches()}")
    _row("llama.cpp log", str(paths.llama_log_file()))
    _row("models", f"{hub.cache_dir} (the Hugging Face cache)")


def _print_speeds() -> None:
    """Each target's latest plain rate here beside its best: a rate far below the best says the machine was busy."""
    speeds = plain_speed.recorded()
    if not speeds:
        return
    print("Plain decoding here (the latest answer's rate, and the best)")
    for speed in speeds:
        _row(speed.target, f"{speed.last:.1f} tok/s, best {speed.best:.1f} ({speed.threads} threads)", indent=2)
        if speed.slowed:
            _row("", f"far below its best: {speed.note()}", indent=2)
    print()


def _print_pairs(hub: HubConfig, memory: DeviceMemory) -> None:
    print(f"Pairs (downloaded, and the memory plan at a {defaults.N_CTX}-token context)")
    try:
        catalog = load_catalog()
    except LocalspecError as exc:
        _row("catalog", f"cannot be read: {exc}")
        return
    for pair in catalog.pairs.values():
        states = pair_states(hub, pair)
        status = download_status(states)
        plan = ""
        if status == "yes":
            target, draft = (state.first_file for state in states)
            assert target is not None and draft is not None
            try:
                plan = plan_pair(target, draft, defaults.N_CTX, memory).describe()
                header = read_local_header(target)
                reason = memory_kind(header.architecture).reason
                plan += f"; the target is recurrent: {reason}" if reason else ""
                mtp_note = ModelSummary.from_headers(header).mtp_note
                plan += f"; the target: {mtp_note}" if mtp_note else ""
            except LocalspecError as exc:
                plan = str(exc)
        print(f"  {pair.id:<30}{status:<13}{plan}".rstrip())


def _print_rpc(endpoints: list[str]) -> bool:
    """Whether RPC can be used here, and each server asked for: reachable, its protocol, devices and free memory."""
    print("Remote devices (llama.cpp's RPC backend)")
    module = rpc_build.module_path()
    if rpc_build.is_built():
        _row("RPC backend", f"built ({module}); its server: {rpc_build.server_path()}")
    elif module.is_file():
        _row("RPC backend", "built by an older localspec: run `localspec rpc-build` again (a server lost mid-answer would "
                            "end this process)")
    else:
        _row("RPC backend", "not built: `localspec rpc-build` builds it once (about a minute), for --rpc")
    healthy = True
    for endpoint in endpoints:
        try:
            server = rpc.probe(endpoint)
        except rpc.RpcError as exc:
            _row(endpoint, str(exc))
            healthy = False
            continue
        version = ".".join(map(str, server.version))
        devices = "; ".join(f"device {d.index}: {_memory(d.free_bytes, d.total_bytes, 'free')}" for d in server.devices)
        trust = "" if rpc.is_trusted_network(endpoint) else " (not a private address: anyone who can reach it can use it)"
        _row(endpoint, f"protocol {version}, {devices or 'no devices'}{trust}")
    return healthy


def run_doctor(args: argparse.Namespace) -> int:
    endpoints = rpc.parse_endpoints(args.rpc) if args.rpc else []
    info = machine_info()
    verdict = amx.amx_verdict()  # may probe the build in a child process: once
    hub = HubConfig.from_env()
    print("localspec doctor\n")
    _print_software(info)
    print()
    _print_hardware(info, verdict)
    print()
    healthy = _print_rpc(endpoints)
    print()
    _print_paths(hub)
    print()
    _print_speeds()
    _print_pairs(hub, device_memory(info))
    pip = f"{sys.executable} -m pip"
    for advice in (_amx_advice(verdict, pip), unused_gpu_advice(info.gpu_offload, info.llama_system_info, pip)):
        if advice:
            print(f"\n{advice}")
    return 0 if healthy else 1
