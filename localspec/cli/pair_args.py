"""From the command line's model arguments (--pair or --target/--draft, --ctx-size, layers) to a planned, loadable pair.

`generate` and `bench` take the same arguments and load the same way.
"""

from __future__ import annotations

import argparse
import sys

from localspec import paths
from localspec.catalog.models_toml import CatalogError, load_catalog
from localspec.catalog.pair_files import local_pair_paths
from localspec.engine import defaults
from localspec.engine.engine import EngineConfig
from localspec.hub.config import HubConfig
from localspec.machine import rpc
from localspec.machine.device import device_memory, machine_info
from localspec.machine.memory_plan import MemoryPlan, plan_pair


def resolve_models(args: argparse.Namespace) -> None:
    """--pair ID becomes the pair's downloaded files and its recommended draft settings; else --target is required."""
    pair = None
    if args.pair:
        if args.target or args.draft:
            raise CatalogError("Give --pair, or --target (and --draft), not both.")
        pair = load_catalog().get(args.pair)
        args.target, args.draft = local_pair_paths(HubConfig.from_env(), pair)
    elif args.target is None:
        raise CatalogError("Name the models: --pair ID (see `localspec list`), or --target PATH [--draft PATH].")
    if args.draft_p_min is None:
        args.draft_p_min = pair.draft_p_min if pair and pair.draft_p_min is not None else defaults.DRAFT_P_MIN
    if args.command == "generate" and args.draft_max is None:  # bench sweeps its own list of K
        args.draft_max = defaults.draft_max_for(args.drafter, pair.draft_max if pair else None)


def _runs_self_draft(args: argparse.Namespace) -> bool:
    """Whether this command will load the self-draft: `generate --drafter self`, or a bench sweep that includes it."""
    if args.command == "bench":
        return args.drafters is None or "self" in [part.strip() for part in args.drafters.split(",")]
    return getattr(args, "drafter", None) == "self"


def attach_rpc_servers(args: argparse.Namespace) -> bool:
    """--rpc's servers join ggml's devices before anything is planned or loaded; whether any was given."""
    if not getattr(args, "rpc", None):
        return False
    for server in rpc.attach(rpc.parse_endpoints(args.rpc)):
        if not rpc.is_trusted_network(server.endpoint):
            print(f"localspec: warning: {server.endpoint} is not on a private network, and ggml-rpc-server has no "
                  "authentication: anyone who reaches it can use it. Prefer a trusted network or an SSH tunnel.", file=sys.stderr)
    return True


def memory_plan_from_args(args: argparse.Namespace, with_draft: bool = True) -> MemoryPlan:
    """Where each model's layers go, from the headers and the memory free now; refuses a pair that cannot fit.
    With --rpc the remote devices count as GPU memory for the target; the draft stays on this machine (it is
    latency-bound: a round trip per draft token would cost more than it saves), on the CPU unless a local GPU has room."""
    draft = args.draft if with_draft else None
    draft_gpu_layers = args.draft_gpu_layers
    remote = attach_rpc_servers(args)
    info = machine_info()  # read once: each RPC server is asked for its memory over the network
    if remote and draft_gpu_layers is None and all(d.is_remote for d in info.gpus):
        draft_gpu_layers = 0
    return plan_pair(args.target, draft, args.ctx_size, device_memory(info), args.target_gpu_layers, draft_gpu_layers,
                     with_self_draft=_runs_self_draft(args), self_draft_layers=getattr(args, "self_layers", None))


def engine_config_from_args(args: argparse.Namespace, with_draft: bool = True, plan: MemoryPlan | None = None) -> EngineConfig:
    plan = plan or memory_plan_from_args(args, with_draft)
    return EngineConfig(
        target=args.target,
        draft=args.draft if with_draft else None,
        n_ctx=args.ctx_size,
        target_gpu_layers=plan.target.gpu_layers,
        draft_gpu_layers=plan.draft_gpu_layers,
        n_threads=args.threads,
        self_draft_dir=paths.self_draft_dir(),
        self_draft_layers=getattr(args, "self_layers", None),
        self_draft_gpu_layers=plan.self_draft_gpu_layers,
        cost_cache_dir=paths.cost_cache_dir(),
    )
