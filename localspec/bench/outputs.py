"""Where a bench's results go, checked before anything loads and written as each prompt finishes.

A bench runs for minutes: a folder given to --json once cost 259 s of results at the very end, and Ctrl-C dropped
every finished measurement. So the paths are checked first, the JSON is rewritten after every prompt, and an
interrupted bench keeps (and reports) the prompts it finished.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from localspec.bench import reference
from localspec.bench.charts import save_charts
from localspec.bench.report import grammar_ms_per_pass, grammar_table
from localspec.bench.results import BenchResult
from localspec.engine.errors import EngineError
from localspec.errors import UsageError


def check_outputs(args: argparse.Namespace) -> None:
    """A UsageError, before the pair loads, for an output that could not be written or a llama.cpp bin without its tools."""
    json_file: Path | None = args.json_file
    if json_file is not None:
        if json_file.is_dir():
            raise UsageError(f"--json {json_file} is a folder: give a file name, such as {json_file / 'bench.json'}.")
        if not json_file.parent.is_dir():
            raise UsageError(f"--json {json_file}: the folder {json_file.parent} does not exist. Create it first, or write elsewhere.")
        if not os.access(json_file.parent, os.W_OK) or (json_file.exists() and not os.access(json_file, os.W_OK)):
            raise UsageError(f"--json {json_file} cannot be written here (permissions). Give a path you can write.")
    charts: Path | None = args.charts
    if charts is not None:
        if charts.exists() and not charts.is_dir():
            raise UsageError(f"--charts {charts} is a file: --charts takes a folder, where the two PNG charts go.")
        try:
            charts.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--charts {charts} cannot be created ({exc.strerror or exc}). Give a folder you can write.") from None
    if args.llama_cpp_bin:
        tools = ["llama-bench"] + (["llama-speculative-simple"] if getattr(args, "draft", None) is not None else [])
        try:
            for tool in tools:
                reference.tool(args.llama_cpp_bin, tool)
        except EngineError as exc:
            raise UsageError(str(exc)) from None


def write_json(args: argparse.Namespace, result: BenchResult) -> None:
    """The results so far (rewritten whole, through a temporary file, so a reader never sees half of one)."""
    if args.json_file is None:
        return
    temporary = args.json_file.with_name(args.json_file.name + ".tmp")
    temporary.write_text(json.dumps(as_json(result), indent=2))
    temporary.replace(args.json_file)


def save_outputs(args: argparse.Namespace, result: BenchResult) -> None:
    write_json(args, result)
    if args.json_file is not None:
        print(f"\nfull results: {args.json_file}")
    if args.charts is not None and result.measurements:
        for path in save_charts(result, args.charts):
            print(f"chart: {path}")


def as_json(result: BenchResult) -> dict[str, object]:
    return {
        "machine": result.machine,
        "ks": result.ks,
        "temperature": result.temperature,
        "lockstep": result.lockstep,
        "modes": [asdict(mode) | {"label": mode.label} for mode in result.modes],
        "prompts": [asdict(p) for p in result.prompts],
        "measurements": [
            {"prompt": m.prompt_id, "mode": m.mode.label, "drafter": m.mode.drafter, "k": m.mode.k, "verification": m.mode.verification,
             "departs_at": m.departs_at, "tokens": m.tokens, "text": m.text, "margins": m.margins, "stats": m.stats.to_dict(),
             "grammar_ms_per_pass": grammar_ms_per_pass([m])}
            for m in result.measurements
        ],
        "grammar": {row.category: asdict(row) for row in grammar_table(result)},
        "notes": result.notes,
        "llama_bench_tg": result.llama_bench_tg,
        "llama_bench_matched": {"n_gen": result.matched_workload[0], "depth": result.matched_workload[1], "tok_s": result.llama_bench_matched},
        "reference": [asdict(r) for r in result.reference],
        "reference_error": result.reference_error,
        "verify_ms": result.verify_ms,
        "verify_passes": result.verify_passes,
        "lookup_ceiling": {prompt_id: asdict(c) | {"ratio": c.ratio} for prompt_id, c in result.ceilings.items()},
        "interrupted": result.interrupted,
    }
