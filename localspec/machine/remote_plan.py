"""A pair's memory plan with ggml-rpc-servers lending their devices: the one rule the command line and the app share.

The remote devices count as GPU memory for the target. The draft stays on this machine unless the user says
otherwise (--draft-rpc): it is latency-bound, and a round trip per draft token costs more than drafting saves. On a
machine whose only GPU-type devices are remote, that means the draft runs on the CPU.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from localspec.machine import rpc
from localspec.machine.device import device_memory, machine_info
from localspec.machine.memory_plan import MemoryPlan, plan_pair


def untrusted_warning(endpoint: str) -> str:
    return (f"{endpoint} is not on a private network, and ggml-rpc-server has no authentication: anyone who reaches it "
            "can use it. Prefer a trusted network or an SSH tunnel.")


def plan_pair_on_devices(target: Path, draft: Path | None, n_ctx: int, target_gpu_layers: int | None = None,
                         draft_gpu_layers: int | None = None, rpc_servers: str | None = None, draft_rpc: bool = False,
                         with_self_draft: bool = False, self_draft_layers: int | None = None, n_seq: int = 1) -> MemoryPlan:
    """plan_pair over this machine's devices and, with `rpc_servers` (HOST:PORT[,...]), those servers' devices, which
    are probed and attached first (an RpcError names a server that cannot be used).

    Once a server has been attached, ggml lists its devices for the rest of the process (a server dropped from the
    settings, or lost, included), so from then on each model gets its devices by name: the local GPUs, plus the
    servers chosen for it; a server not chosen counts for nothing."""
    endpoints = rpc.parse_endpoints(rpc_servers) if rpc_servers else []
    servers = rpc.attach(endpoints) if endpoints else []
    rpc.use(endpoints)
    warnings = [untrusted_warning(server.endpoint) for server in servers if not rpc.is_trusted_network(server.endpoint)]
    info = machine_info()  # read once: each RPC server is asked for its memory over the network
    target_devices = draft_devices = None
    if any(device.is_remote for device in info.devices):
        chosen = [d for d in info.devices if not d.is_remote or d.description in endpoints]
        gpu = any(d.is_gpu for d in chosen)  # none: a CPU build whose servers were all left out plans for the CPU
        info = replace(info, devices=chosen, gpu_offload=info.gpu_offload and gpu, backend=info.backend if gpu else "CPU")
        local = tuple(d.handle for d in info.gpus if not d.is_remote)
        remote = tuple(d.handle for d in info.gpus if d.is_remote)
        target_devices, draft_devices = local + remote, local + (remote if draft_rpc else ())
        if not draft_devices and draft_gpu_layers is None:
            draft_gpu_layers = 0
    plan = plan_pair(target, draft, n_ctx, device_memory(info), target_gpu_layers, draft_gpu_layers,
                     with_self_draft=with_self_draft, self_draft_layers=self_draft_layers, n_seq=n_seq)
    return replace(plan, warnings=(*warnings, *plan.warnings), target_devices=target_devices, draft_devices=draft_devices)
