"""The `localspec` command line: its arguments, and which command's module runs.

Each command's module is imported only when that command runs: they load llama.cpp, Textual or the hub client,
which would make `localspec --help` and `--version` take seconds instead of a tenth of one.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from localspec import __version__
from localspec.bench.reference import LLAMA_CPP_DEFAULT_P_MIN
from localspec.cli.arg_checks import check_args
from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.errors import LocalspecError, UsageError, os_error_advice
from localspec.serve.options import DEFAULT_PARALLEL

if TYPE_CHECKING:
    from localspec.cli.app_args import AppOpening


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models")
    group.add_argument("--pair", help="a downloaded pair from the catalog (`localspec list`), instead of --target/--draft")
    group.add_argument("--target", type=Path, help="target model GGUF file")
    group.add_argument("--draft", type=Path, help="draft model GGUF file (same tokenizer as the target)")
    group.add_argument("--ctx-size", type=int, default=defaults.N_CTX, help=f"context size shared by both models (default {defaults.N_CTX})")
    group.add_argument("--threads", type=int, help="CPU threads (default: physical cores)")
    group.add_argument("--target-gpu-layers", type=int, help="target layers on the GPU (default: the memory planner's choice; -1 = all)")
    group.add_argument("--draft-gpu-layers", type=int, help="draft layers on the GPU (default: the memory planner's choice; -1 = all)")
    group.add_argument("--rpc", metavar="HOST:PORT[,...]",
                       help="ggml-rpc-server(s) whose devices take the target's layers (the draft stays here); trusted networks only")
    group.add_argument("--draft-rpc", action="store_true",
                       help="let the draft's layers go to the --rpc servers too (by default it stays on this machine: it is latency-bound)")


def _add_sampling_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--temperature", type=float, default=defaults.TEMPERATURE, help="0 = greedy, exactly the target's output (default 0)")
    group.add_argument("--top-k", type=int, default=defaults.TOP_K, help=f"0 = off (default {defaults.TOP_K})")
    group.add_argument("--top-p", type=float, default=defaults.TOP_P, help=f"(default {defaults.TOP_P})")
    group.add_argument("--min-p", type=float, default=defaults.MIN_P, help=f"(default {defaults.MIN_P})")
    group.add_argument("--seed", type=int, help="makes sampling reproducible (default: random, reported)")
    group.add_argument(
        "--verification",
        choices=["keyed", "speculative", "sample-match"],
        help="at temperature > 0: keyed draws (the default with --seed: the seed repeats the answer whatever drafts it), "
             "speculative sampling (the default without: the best acceptance) or llama.cpp's sample-and-match",
    )


def _add_draft_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("speculation")
    group.add_argument("--drafter", choices=list(registry.DRAFTERS), metavar="NAME",
                       help="; ".join(f"{d.name}: {d.description}" for d in registry.DRAFTERS.values()) + f" (default {registry.DEFAULT})")
    group.add_argument("--self-layers", type=int, help="blocks of the target the self drafter keeps (default: a quarter)")
    group.add_argument("--draft-max", type=int, help=f"most tokens drafted per step, K (default: {defaults.AUTO_DRAFT_MAX} for auto; "
                                                      f"else the pair's, else {defaults.DRAFT_MAX})")
    group.add_argument("--draft-p-min", type=float, help=f"stop drafting below this draft confidence (default: the pair's, else {defaults.DRAFT_P_MIN})")


def _add_model_commands(commands: argparse._SubParsersAction) -> None:
    pull = commands.add_parser("pull", help="download a pair (checked from its headers first) or one hub file")
    pull.add_argument("name", metavar="PAIR|REPO/FILE", help="a pair id from `localspec list`, or OWNER/REPO/FILE.gguf")
    pull.add_argument("--skip-check", action="store_true", help="download without the header-only pair check")

    commands.add_parser("list", help="the catalog's pairs: downloaded or not, size on disk, where")

    rm = commands.add_parser("rm", help="delete a pair's downloaded files (files another downloaded pair uses are kept)")
    rm.add_argument("pair", metavar="PAIR")
    rm.add_argument("--yes", "-y", action="store_true", help="delete without asking")

    check = commands.add_parser("check", help="can this draft serve this target? read from the GGUF headers only")
    check.add_argument("pair", metavar="PAIR", nargs="?", help="a pair id (default: give --target and --draft)")
    check.add_argument("--target", help="local GGUF path, or OWNER/REPO/FILE.gguf on the hub")
    check.add_argument("--draft", help="local GGUF path, or OWNER/REPO/FILE.gguf on the hub")


APP_OPTIONS = ("app_pair", "app_target", "app_draft")  # the top-level options' dests: a command's own --pair is another
EXIT_STATUS = ("exit status: 0 done; 2 the command line is wrong (an option, or a value it cannot take); 1 anything else "
               "failed (a model or other file, the network, the machine); 130 interrupted (Ctrl-C).")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="localspec", epilog=EXIT_STATUS,
                                     description="Local speculative decoding with GGUF target/draft pairs. With no command, the chat "
                                                 "app opens: on the last pair used, or on the pair or the files given here.")
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    opened = parser.add_argument_group("the app's models (with no command)")
    opened.add_argument("--pair", dest="app_pair", metavar="ID", help="open the app on this pair (`localspec list`)")
    opened.add_argument("--target", dest="app_target", type=Path, metavar="F.gguf",
                        help="open the app on this model file, with --draft's if given (the files are saved as a pair in your models.toml)")
    opened.add_argument("--draft", dest="app_draft", type=Path, metavar="D.gguf", help="the target's draft model file (same tokenizer)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    generate = commands.add_parser("generate", help="answer one prompt, streaming the text")
    _add_model_args(generate)
    given = generate.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", help="the user's message ('-': read it from standard input)")
    given.add_argument("--prompt-file", type=Path, help="read the user's message from this UTF-8 text file")
    generate.add_argument("--system", help="system prompt")
    generate.add_argument("--raw", action="store_true", help="use the prompt as plain text, without the chat template")
    generate.add_argument("--max-tokens", type=int, help="most tokens in the answer (default: until it ends or the context is full)")
    generate.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    generate.add_argument("--no-draft", action="store_true", help="plain decoding with the target alone")
    generate.add_argument("--json", action="store_true", help="print one JSON object with text, tokens and statistics")
    held = generate.add_mutually_exclusive_group()
    held.add_argument("--json-schema", metavar="SCHEMA", help="hold the answer to this JSON schema: a file, or the schema inline ('{...}')")
    held.add_argument("--grammar", type=Path, metavar="FILE", help="hold the answer to this GBNF grammar (llama.cpp's format, a rule named root)")
    _add_sampling_args(generate)
    _add_draft_args(generate)

    bench = commands.add_parser("bench", help="plain against speculative decoding, side by side in one run")
    _add_model_args(bench)
    bench.add_argument("--prompts", type=Path, help="JSONL prompt set (default: the bundled set)")
    bench.add_argument("--only", help="comma-separated prompt ids or categories to run (default: every prompt)")
    bench.add_argument("--draft-max", default="1,2,4,8", help="comma-separated K values to sweep (default 1,2,4,8)")
    bench.add_argument("--auto-max", type=int, help=f"auto's K cap (default: {defaults.AUTO_DRAFT_MAX}, as generate, serve and the app run it)")
    bench.add_argument("--drafters", help="comma-separated fixed drafters to sweep (default: all the pair can run; none: plain and auto alone; "
                                          "auto always runs)")
    bench.add_argument("--temperature", type=float, default=0.0,
                       help="0 (default) checks every mode against plain output; above 0 also compares speculative sampling with sample-and-match")
    bench.add_argument("--seed", type=int, default=0, help="at temperature > 0, prompt i samples with seed+i in every mode (default 0)")
    bench.add_argument("--charts", type=Path, help="also save the two PNG charts in this directory")
    bench.add_argument("--draft-p-min", type=float, help=f"localspec's draft p-min (default: the pair's, else {defaults.DRAFT_P_MIN})")
    bench.add_argument("--max-tokens", type=int, default=128)
    bench.add_argument("--rounds", type=int, default=1, help="repeat the whole interleaved sweep (default 1)")
    bench.add_argument("--lockstep", action="store_true",
                       help="run plain decoding and auto a token each in turn, on two contexts of the target's weights, so the "
                            "machine's drift hits both alike (with --drafters none)")
    bench.add_argument("--margins", action="store_true", help="record the target's top-2 logit gap, to show where outputs part (slows every step)")
    bench.add_argument("--json", dest="json_file", type=Path, help="also write the full results to this file")
    bench.add_argument(
        "--reference-p-min", default=f"{LLAMA_CPP_DEFAULT_P_MIN},{defaults.DRAFT_P_MIN}",
        help=f"p-min values to run llama.cpp's example at (default: its own default {LLAMA_CPP_DEFAULT_P_MIN}, and ours {defaults.DRAFT_P_MIN})",
    )
    bench.add_argument("--llama-cpp-bin", type=Path,
                       help="directory with llama.cpp's llama-bench and llama-speculative-simple, to measure them in the same run")
    bench_kinds = bench.add_subparsers(dest="bench_command", metavar="autocomplete")
    autocomplete = bench_kinds.add_parser(
        "autocomplete", help="replay typing through source files: a fill-in-the-middle request for the rest of every line, "
                             "timed for plain decoding, auto, and auto without lookup across requests")
    autocomplete.add_argument("files", type=Path, nargs="*", metavar="FILE",
                              help="source files to replay (default: two small source files of localspec's own)")
    _add_model_args(autocomplete)
    autocomplete.add_argument("--lines", type=int, help="replay only the first N lines that have text (default: all)")
    autocomplete.add_argument("--rounds", type=int, default=1, help="replay every mode this many times, taking turns (default 1)")
    autocomplete.add_argument("--json", dest="json_file", type=Path, help="also write every completion and its timings to this file")

    load = commands.add_parser("bench-serve", help="load a running server with 1, 2, 4, 8... concurrent clients sending the bench's prompts")
    load.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080 (localspec serve, or llama.cpp's llama-server)")
    load.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts (default 1,2,4,8)")
    load.add_argument("--rounds", type=int, default=1,
                      help="send every prompt this many times at each concurrency, the clients sharing them (default 1)")
    load.add_argument("--max-tokens", type=int, default=64)
    load.add_argument("--prompts", type=Path, help="JSONL prompt set (default: the bundled set)")
    load.add_argument("--only", help="comma-separated prompt ids or categories")
    load.add_argument("--api-key", help="the server's key, if it has one")

    serve = commands.add_parser("serve", help="an OpenAI- and llama.cpp-compatible server for editors and agents, on this machine")
    _add_model_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    serve.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on every route but /health (needed beyond loopback)")
    serve.add_argument("--insecure-no-api-key", action="store_true", help="listen beyond this machine without a key (a trusted network only)")
    serve.add_argument("--alias", help="the model name clients see (default: the pair id, else the target file's name)")
    serve.add_argument("-np", "--parallel", type=int, default=DEFAULT_PARALLEL, metavar="N",
                       help=f"slots: requests generated at once, in one batch (default {DEFAULT_PARALLEL}); each slot has "
                            "--ctx-size tokens of context, so the caches hold N times that")
    _add_draft_args(serve)

    make_draft = commands.add_parser("make-draft", help="cut a self-speculative draft from a target: its first N blocks and its output head")
    make_draft.add_argument("target", type=Path, metavar="TARGET.gguf")
    make_draft.add_argument("out", type=Path, metavar="OUT.gguf")
    make_draft.add_argument("--layers", type=int, required=True, help="how many of the target's blocks the draft keeps")

    _add_model_commands(commands)
    doctor = commands.add_parser("doctor", help="what localspec sees: versions, backend, GPUs and memory, paths, downloaded pairs")
    doctor.add_argument("--rpc", metavar="HOST:PORT[,...]", help="also check these ggml-rpc-servers: reachable, protocol, devices, free memory")
    rpc_build = commands.add_parser("rpc-build", help="build llama.cpp's RPC backend and ggml-rpc-server once, for --rpc")
    rpc_build.add_argument("--sdist", type=Path, help="llama-cpp-python's source .tar.gz, if pip cannot fetch it")
    clean = commands.add_parser("clean", help="delete the self-drafts and measured costs localspec cached (never a download or a chat)")
    clean.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is not None and any(getattr(args, name) is not None for name in APP_OPTIONS):
        parser.error(f"--pair, --target and --draft before the command open the app: give them after it "
                     f"(localspec {args.command} --target F.gguf ...).")
    # Each command's module is imported here, when it runs: start-up time (see the module's docstring).
    try:
        if args.command is None:
            from localspec.cli.app_args import app_opening

            return _run_app(app_opening(args))
        check_args(args)
        if args.command == "generate":
            from localspec.cli.generate import run_generate

            return run_generate(args)
        if args.command == "make-draft":
            from localspec.cli.make_draft import run_make_draft

            return run_make_draft(args)
        if args.command == "bench":
            from localspec.bench.autocomplete import run_autocomplete
            from localspec.bench.runner import run_bench
            from localspec.cli.pair_args import engine_config_from_args, resolve_models

            pair = resolve_models(args)
            if args.bench_command == "autocomplete":
                return run_autocomplete(args, engine_config_from_args(args))
            return run_bench(args, engine_config_from_args(args), pair)
        if args.command == "bench-serve":
            from localspec.bench.load import run_bench_serve

            return run_bench_serve(args)
        if args.command == "serve":
            from localspec.cli.serve import run_serve

            return run_serve(args)
        if args.command == "doctor":
            from localspec.cli.doctor import run_doctor

            return run_doctor(args)
        if args.command == "rpc-build":
            from localspec.cli.rpc_build import run_rpc_build

            return run_rpc_build(args)
        if args.command == "clean":
            from localspec.cli.clean import run_clean

            return run_clean(args)
        from localspec.cli.models import run_model_command

        return run_model_command(args)
    except LocalspecError as exc:
        print(f"localspec: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1
    except OSError as exc:  # the machine refused a file operation (a read-only folder, a full disk): say which, and why
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"localspec: {exc.strerror or exc}{where}: {os_error_advice(exc)}.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _run_app(opening: AppOpening) -> int:
    from localspec.tui.app import LocalspecApp

    app = LocalspecApp(open_pair=opening.pair_id, notice=opening.notice)
    app.run()
    if app.load_cancel is not None:  # the load worker stops at its next tensor; the process ends when it has
        print("localspec: stopping the model load…", file=sys.stderr)
    return app.return_code or 0
