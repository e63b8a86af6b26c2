"""`localspec serve`: the command line's pair arguments turned into a running server."""

from __future__ import annotations

import argparse

from localspec.cli.pair_args import engine_config_from_args, resolve_models
from localspec.engine.drafters import registry
from localspec.serve.options import ServeOptions, check_bind, check_parallel
from localspec.serve.run import run_server
from localspec.session.generation_request import resolve


def run_serve(args: argparse.Namespace) -> int:
    pair = resolve_models(args)
    options = ServeOptions(host=args.host, port=args.port, api_key=args.api_key, insecure_no_api_key=args.insecure_no_api_key,
                           alias=args.alias or args.pair or args.target.stem, drafter=args.drafter or registry.DEFAULT,
                           draft_max=args.draft_max, draft_p_min=args.draft_p_min, pair=pair, parallel=args.parallel)
    # The server's own settings are what a silent request gets: checked now, by the rules every request meets.
    resolve(options.standing, parts=registry.PairParts.before_load(args.draft is not None), context=args.ctx_size, pair=pair)
    check_parallel(options)
    check_bind(options)  # before the memory plan reads the headers
    args.ctx_size *= options.parallel  # --ctx-size is each slot's: the caches hold a context per slot
    return run_server(engine_config_from_args(args), options)
