"""`localspec rpc-build`: llama.cpp's RPC backend and ggml-rpc-server, built once for `--rpc` (see machine/rpc_build)."""

from __future__ import annotations

import argparse
import sys

from localspec.machine import rpc_build


def run_rpc_build(args: argparse.Namespace) -> int:
    out = rpc_build.build(lambda stage: print(f"rpc-build: {stage}", file=sys.stderr), args.sdist)
    print(f"Built into {out}:\n"
          f"  {rpc_build.module_path().name}: loaded by localspec when you give --rpc HOST:PORT\n"
          f"  {rpc_build.server_path().name}: run it on each machine that lends its devices, e.g.\n"
          f"    {rpc_build.server_path()} -H 0.0.0.0 -p 50052\n"
          "  (built for this machine's CPU; on another machine build it there with `localspec rpc-build`).\n"
          "ggml-rpc-server has no authentication: run it only on a network you trust.")
    return 0
