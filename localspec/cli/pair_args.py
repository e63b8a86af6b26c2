"""From the command line's model arguments (--pair or --target/--draft, --ctx-size, layers) to a planned, loadable pair.

`generate` and `bench` take the same arguments and load the same way.
"""

from __future__ import annotations

import argparse
import sys

from localspec import paths
from localspec.catalog.models_toml import Pair, load_catalog
from localspec.catalog.pair_files import local_pair_paths
from localspec.engine.drafters import registry
from localspec.engine.engine import EngineConfig
from localspec.errors import UsageError
from localspec.hub.config import HubConfig
from localspec.machine.memory_plan import MemoryPlan
from localspec.machine.remote_plan import plan_pair_on_devices


def resolve_models(args: argparse.Namespace) -> Pair | None:
    """--pair ID becomes the pair's downloaded files in args.target and args.draft, and the pair (whose recommended draft
    settings the request resolver reads); else --target is required."""
    if not args.pair:
        if args.target is None:
            raise UsageError("Name the models: --pair ID (see `localspec list`), or --target PATH [--draft PATH].")
        return None
    if args.target or args.draft:
        raise UsageError("Give --pair, or --target (and --draft), not both.")
    pair = load_catalog().get(args.pair)
    args.target, args.draft = local_pair_paths(HubConfig.from_env(), pair)
    return pair


def _runs_self_draft(args: argparse.Namespace) -> bool:
    """Whether this command will load the self-draft: `generate --drafter self`, or a bench sweep that includes it."""
    if args.command == "bench":
        named = [part.strip() for part in args.drafters.split(",")] if args.drafters is not None else list(registry.FIXED)
    else:
        named = [getattr(args, "drafter", None) or registry.DEFAULT]
    return any(name in registry.DRAFTERS and registry.Part.SELF_DRAFT in registry.DRAFTERS[name].requires for name in named)


def memory_plan_from_args(args: argparse.Namespace, with_draft: bool = True) -> MemoryPlan:
    """Where each model's layers go, from the headers and the memory free now (with --rpc, the servers' too: see
    machine.remote_plan); refuses a pair that cannot fit."""
    if getattr(args, "draft_rpc", False) and not getattr(args, "rpc", None):
        raise UsageError("--draft-rpc puts the draft on the --rpc servers: give --rpc HOST:PORT too.")
    return plan_pair_on_devices(args.target, args.draft if with_draft else None, args.ctx_size, args.target_gpu_layers,
                                args.draft_gpu_layers, getattr(args, "rpc", None), getattr(args, "draft_rpc", False),
                                with_self_draft=_runs_self_draft(args), self_draft_layers=getattr(args, "self_layers", None),
                                n_seq=getattr(args, "parallel", 1))


def engine_config_from_args(args: argparse.Namespace, with_draft: bool = True, plan: MemoryPlan | None = None) -> EngineConfig:
    if plan is None:
        plan = memory_plan_from_args(args, with_draft)
        for warning in plan.warnings:
            print(f"localspec: warning: {warning}", file=sys.stderr)
    return EngineConfig(
        target=args.target,
        draft=args.draft if with_draft else None,
        n_ctx=args.ctx_size,
        target_gpu_layers=plan.target.gpu_layers,
        draft_gpu_layers=plan.draft_gpu_layers,
        n_threads=args.threads,
        self_draft_dir=paths.self_draft_dir(),
        self_draft_layers=getattr(args, "self_layers", None),
        self_draft_floor=plan.self_draft_floor,
        self_draft_gpu_layers=plan.self_draft_gpu_layers,
        cost_cache_dir=paths.cost_cache_dir(),
        target_devices=plan.target_devices,
        draft_devices=plan.draft_devices,
    )
