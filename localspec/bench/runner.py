"""Runs the bench: every prompt, plain then each K, interleaved on the same loaded models.

Interleaving means slow drift (thermal, other load) hits every mode alike, so
the ratios printed are fair even when absolute rates wander. Benchmarks are
reported, never asserted: tests check correctness only.
"""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, TypeVar

from localspec import __version__
from localspec.bench import reference
from localspec.bench.report import print_report
from localspec.device import device_record
from localspec.engine.chat import Message, chat_prompt_tokens, render_chat
from localspec.engine.decode import Decoder, GenerationConfig
from localspec.engine.engine import Engine
from localspec.engine.errors import EngineError
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.stats import GenerationStats


T = TypeVar("T")


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    prompt: str
    system: str | None = None


@dataclass
class Measurement:
    prompt_id: str
    k: int  # 0 = plain decoding
    tokens: list[int]
    stats: GenerationStats
    departs_at: int | None = None  # first token that differs from plain output (greedy runs)
    margins: list[float] = field(default_factory=list)  # target's top-1 minus top-2 logit per token (--margins)

    def margin_at_departure(self, plain: Measurement) -> float | None:
        """The closer of the two runs' top-2 logit gaps where the outputs part: a near-tie, or a bug."""
        if self.departs_at is None or not self.margins or not plain.margins:
            return None
        return min(self.margins[self.departs_at], plain.margins[self.departs_at])


@dataclass(frozen=True)
class ReferenceMeasurement:
    """One llama-speculative-simple run: which prompt, K and p-min, and what it measured."""

    prompt_id: str
    k: int
    p_min: float
    run: reference.ReferenceRun


@dataclass
class BenchResult:
    ks: list[int]
    prompts: list[BenchPrompt]
    measurements: list[Measurement] = field(default_factory=list)
    llama_bench_tg: list[float] = field(default_factory=list)  # tg64 on an empty context, before and after our runs
    llama_bench_matched: list[float] = field(default_factory=list)  # our workload: tg<max_tokens> @ d<mean prompt>
    matched_workload: tuple[int, int] = (0, 0)  # (n_gen, depth) of llama_bench_matched
    reference: list[ReferenceMeasurement] = field(default_factory=list)
    reference_error: str | None = None
    machine: dict[str, object] = field(default_factory=dict)


def load_prompts(path: Path | None) -> list[BenchPrompt]:
    text = path.read_text(encoding="utf-8") if path else resources.files("localspec.bench").joinpath("prompts.jsonl").read_text("utf-8")
    source = str(path) if path else "the bundled prompt set"
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompts.append(BenchPrompt(str(record["id"]), str(record.get("category", "other")), str(record["prompt"]), record.get("system")))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise EngineError(
                f"{source}, line {number}: expected a JSON object with \"id\" and \"prompt\" (and optional \"category\", \"system\"): {exc}"
            ) from exc
    if not prompts:
        raise EngineError(f"{source} holds no prompts.")
    return prompts


def parse_p_mins(text: str) -> list[float]:
    try:
        values = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--reference-p-min takes comma-separated probabilities such as 0,0.6, not {text!r}") from None
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError("--reference-p-min values must lie between 0 and 1")
    return values


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--draft-max takes comma-separated integers such as 1,2,4,8, not {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError("--draft-max values must be 1 or more")
    return ks


def _measure(decoder: Decoder, prompt: list[int], config: GenerationConfig) -> tuple[list[int], list[float], GenerationStats]:
    tokens: list[int] = []
    margins: list[float] = []
    for event in decoder.generate(prompt, config):
        if isinstance(event, TokenEvent) and event.token >= 0:
            tokens.append(event.token)
            if event.margin is not None:
                margins.append(event.margin)
        elif isinstance(event, Finished):
            return tokens, margins, event.stats
    raise AssertionError("generate() ended without Finished")


def run_bench(args: argparse.Namespace) -> int:
    from localspec.cli import engine_config_from_args

    ks = parse_ks(args.draft_max)
    reference_p_mins = parse_p_mins(args.reference_p_min)
    prompts = load_prompts(args.prompts)
    if args.draft is None:
        raise EngineError("bench compares plain and speculative decoding: give a draft model with --draft.")
    result = BenchResult(ks=ks, prompts=prompts)
    with Engine(engine_config_from_args(args)) as engine:
        result.machine = {
            "localspec": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "threads": engine.target.n_threads, "target": engine.target.description, "draft": engine.draft.description,
            "device": device_record(engine),
        }
        warmup = chat_prompt_tokens(engine.target, [Message("user", "Hello")])
        for decoder in (engine.plain, engine.speculative):
            _measure(decoder, warmup, GenerationConfig(max_tokens=8, draft_max=ks[-1]))
        depth = round(sum(len(chat_prompt_tokens(engine.target, _messages(p))) for p in prompts) / len(prompts))
        result.matched_workload = (args.max_tokens, depth)
        _llama_bench(args, engine, result)
        for round_index in range(args.rounds):
            for prompt in prompts:
                _bench_prompt(args, engine, prompt, ks, reference_p_mins, round_index, result)
                print(f"  measured {prompt.id} (round {round_index + 1}/{args.rounds})", flush=True)
        _llama_bench(args, engine, result)
    print_report(result)
    if args.json_file:
        args.json_file.write_text(json.dumps(_as_json(result), indent=2))
        print(f"\nfull results: {args.json_file}")
    return 0


def _messages(prompt: BenchPrompt) -> list[Message]:
    return ([Message("system", prompt.system)] if prompt.system else []) + [Message("user", prompt.prompt)]


def _bench_prompt(
    args: argparse.Namespace, engine: Engine, prompt: BenchPrompt, ks: list[int], reference_p_mins: list[float], round_index: int, result: BenchResult
) -> None:
    """Plain, each K, then llama.cpp's example at each K: all of one prompt back to back, so drift hits all alike."""
    tokens = chat_prompt_tokens(engine.target, _messages(prompt))
    modes = [0, *ks]
    shift = round_index % len(modes)
    runs: dict[int, Measurement] = {}
    for k in modes[shift:] + modes[:shift]:
        decoder = engine.plain if k == 0 else engine.speculative
        config = GenerationConfig(max_tokens=args.max_tokens, draft_max=k, draft_p_min=args.draft_p_min, record_margins=args.margins)
        out, margins, stats = _measure(decoder, tokens, config)
        runs[k] = Measurement(prompt.id, k, out, stats, margins=margins)
    for m in runs.values():
        m.departs_at = next((i for i, (a, b) in enumerate(zip(runs[0].tokens, m.tokens)) if a != b), None)
        result.measurements.append(m)
    if args.llama_cpp_bin and not result.reference_error:
        text = render_chat(engine.target, _messages(prompt))
        for k in ks:
            for p_min in reference_p_mins:
                run = _reference_step(result, lambda: reference.speculative_simple(
                    args.llama_cpp_bin, args.target, args.draft, text, k, p_min, args.max_tokens, engine.target.n_threads, args.ctx_size))
                if run is not None:
                    result.reference.append(ReferenceMeasurement(prompt.id, k, p_min, run))


def _llama_bench(args: argparse.Namespace, engine: Engine, result: BenchResult) -> None:
    """llama-bench's plain rate for the target, taken before and after our runs to expose drift.

    Twice: its customary tg64 on an empty context, and our own workload (as many
    tokens as we generate, after a context as long as our mean prompt).
    """
    if not args.llama_cpp_bin:
        return
    n_gen, depth = result.matched_workload
    threads = engine.target.n_threads
    tg = _reference_step(result, lambda: reference.llama_bench_tg(args.llama_cpp_bin, args.target, threads))
    matched = _reference_step(result, lambda: reference.llama_bench_tg(args.llama_cpp_bin, args.target, threads, n_gen, depth))
    if tg is not None and matched is not None:
        result.llama_bench_tg.append(tg)
        result.llama_bench_matched.append(matched)


def _reference_step(result: BenchResult, call: Callable[[], T]) -> T | None:
    """Run one llama.cpp tool; a failure is recorded (and later reported), never fatal to our measurements."""
    if result.reference_error:
        return None
    try:
        return call()
    except EngineError as exc:
        result.reference_error = str(exc)
        return None


def _as_json(result: BenchResult) -> dict[str, object]:
    return {
        "machine": result.machine,
        "ks": result.ks,
        "prompts": [asdict(p) for p in result.prompts],
        "measurements": [
            {"prompt": m.prompt_id, "k": m.k, "departs_at": m.departs_at, "tokens": m.tokens, "margins": m.margins, "stats": m.stats.to_dict()}
            for m in result.measurements
        ],
        "llama_bench_tg": result.llama_bench_tg,
        "llama_bench_matched": {"n_gen": result.matched_workload[0], "depth": result.matched_workload[1], "tok_s": result.llama_bench_matched},
        "reference": [asdict(r) for r in result.reference],
        "reference_error": result.reference_error,
    }
