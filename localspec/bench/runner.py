"""Runs the bench: every prompt in every mode (plain, each drafter at each K, auto), interleaved on the same loaded models.

Interleaving means slow drift (thermal, other load) hits every mode alike, so
the ratios printed are fair even when absolute rates wander. Benchmarks are
reported, never asserted: tests check correctness only.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TypeVar

from localspec import __version__
from localspec.bench import reference
from localspec.bench.ceiling import lookup_ceiling
from localspec.bench.lockstep import LockstepContexts, Run, record, record_in_lockstep
from localspec.bench.outputs import check_outputs, save_outputs, write_json
from localspec.bench.progress import BenchProgress
from localspec.bench.report import print_report
from localspec.bench.results import PLAIN, BenchPrompt, BenchResult, Measurement, Mode, ReferenceMeasurement
from localspec.catalog.models_toml import Pair
from localspec.engine import defaults
from localspec.engine.chat import Message, chat_prompt_tokens, message_dicts, render_chat, supports_tools
from localspec.engine.decode import Decoder
from localspec.engine.drafters import registry
from localspec.engine.drafters.base import NewSession
from localspec.engine.drafters.self_draft import self_draft_path
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import EngineError
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.grammar import GrammarText
from localspec.engine.llama.model import Model
from localspec.engine.pair_check import EAGLE3_ARCHITECTURE, tokenizer_difference
from localspec.engine.sampling import SamplingParams
from localspec.errors import UsageError
from localspec.gguf.header import read_local_header
from localspec.machine.device import device_record
from localspec.session.generation_request import draft_p_min

# Every fixed drafter: auto runs beside them, and plain decoding is the baseline of every ratio.
BENCH_DRAFTERS = registry.FIXED
NO_FIXED_DRAFTER = registry.PLAIN  # --drafters none: plain and auto alone, the comparison a new user's first question asks


T = TypeVar("T")


def load_prompts(path: Path | None) -> list[BenchPrompt]:
    try:
        text = path.read_text(encoding="utf-8") if path else resources.files("localspec.bench").joinpath("prompts.jsonl").read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--prompts {path}: the file cannot be read ({getattr(exc, 'strerror', None) or exc}). "
                         "Give a JSONL file with one {\"id\": ..., \"prompt\": ...} object per line.") from None
    source = str(path) if path else "the bundled prompt set"
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompt = BenchPrompt(str(record["id"]), str(record.get("category", "other")), str(record["prompt"]), record.get("system"),
                                 record.get("response_format"), record.get("tools"), record.get("tool_choice"), record.get("parallel_tool_calls"))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise EngineError(
                f"{source}, line {number}: expected a JSON object with \"id\" and \"prompt\" (and optional \"category\", \"system\", "
                f"\"response_format\", \"tools\", \"tool_choice\", \"parallel_tool_calls\"): {exc}"
            ) from exc
        try:
            _check_structure(prompt)
        except (UsageError, EngineError) as exc:
            raise UsageError(f"{source}, line {number} ({prompt.id}): {exc}") from None
        prompts.append(prompt)
    if not prompts:
        raise EngineError(f"{source} holds no prompts.")
    return prompts


def _check_structure(prompt: BenchPrompt) -> GrammarText | None:
    """A record's answer form read as the server would read it, before the pair loads: the tools' shape, then the grammar
    (a malformed response_format, a tool_choice naming no offered tool, a schema the converter refuses)."""
    if prompt.tools is not None:
        if not isinstance(prompt.tools, list) or not prompt.tools or not all(
                isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict)
                and isinstance(tool["function"].get("name"), str) for tool in prompt.tools):
            raise UsageError('"tools" must be a list of OpenAI tools, {"type": "function", "function": {"name": ..., "parameters": {...}}}.')
    if prompt.parallel_tool_calls is not None and not isinstance(prompt.parallel_tool_calls, bool):
        raise UsageError(f'"parallel_tool_calls" must be true or false, not {prompt.parallel_tool_calls!r}.')
    return prompt.grammar  # made now, so that a bad record fails here and not minutes into the run


def select_prompts(prompts: list[BenchPrompt], only: str | None) -> list[BenchPrompt]:
    """The prompts whose id or category is in the comma-separated `only` (all of them without it)."""
    if only is None:
        return prompts
    wanted = {part.strip() for part in only.split(",") if part.strip()}
    chosen = [p for p in prompts if p.id in wanted or p.category in wanted]
    unknown = wanted - {p.id for p in prompts} - {p.category for p in prompts}
    if unknown or not chosen:
        names = ", ".join(sorted(unknown)) if unknown else repr(only)
        raise UsageError(
            f"--only: no prompt or category named {names}. "
            f"Categories: {', '.join(sorted({p.category for p in prompts}))}; prompts: {', '.join(p.id for p in prompts)}."
        )
    return chosen


def parse_p_mins(text: str) -> list[float]:
    try:
        values = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--reference-p-min takes comma-separated probabilities such as 0,0.6, not {text!r}") from None
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise UsageError("--reference-p-min values must lie between 0 and 1")
    return values


def parse_drafters(text: str | None, parts: registry.PairParts) -> list[str]:
    """The fixed drafters to sweep: as given (`none`: not one, so plain and auto alone), else every one this pair can run
    (drafting through text only where the draft's tokenizer needs it)."""
    if text is None:
        return [d for d in BENCH_DRAFTERS if not parts.lacks(registry.DRAFTERS[d])
                and not (registry.DRAFTERS[d].through_text and registry.Part.TARGET_TOKENIZER in parts.offers)]
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == [NO_FIXED_DRAFTER]:
        return []
    unknown = [n for n in names if n not in BENCH_DRAFTERS]
    if unknown or not names:
        raise UsageError(f"--drafters takes a comma-separated list of {', '.join(BENCH_DRAFTERS)} (or {NO_FIXED_DRAFTER}: plain and "
                         f"auto alone), not {text!r}")
    for name in names:
        if lacking := parts.lacks(registry.DRAFTERS[name]):
            runnable = ", ".join(d for d in BENCH_DRAFTERS if not parts.lacks(registry.DRAFTERS[d]))
            raise UsageError(f"{name} needs {lacking}, which this pair has not: give one (--draft, --pair or another target), "
                             f"or bench {runnable} only.")
    return list(dict.fromkeys(names))


def _pair_parts(config: EngineConfig) -> registry.PairParts:
    """What the pair's files offer the drafters, from their headers: a draft model (of the target's tokenizer or not) or an
    EAGLE-3 head, MTP layers."""
    target = read_local_header(config.target)
    draft = read_local_header(config.draft) if config.draft is not None else None
    eagle3 = draft is not None and draft.architecture == EAGLE3_ARCHITECTURE
    same_tokenizer = draft is None or eagle3 or not tokenizer_difference(target, draft)
    return registry.PairParts.offered(draft is not None and not eagle3, same_tokenizer, bool(target.arch_value("nextn_predict_layers")), eagle3)


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--draft-max takes comma-separated integers such as 1,2,4,8, not {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > defaults.DRAFT_MAX_LIMIT:
        raise UsageError(f"--draft-max values must be from 1 to {defaults.DRAFT_MAX_LIMIT}, not {text!r}")
    return ks


def bench_modes(drafters: list[str], ks: list[int], temperature: float, auto_max: int | None = None) -> list[Mode]:
    """Plain, each drafter at each K, auto (capped at `auto_max`, else as users run it); at temperature > 0 also keyed draws
    and sample-and-match for the drafters that sample."""
    modes = [PLAIN, *(Mode(d, k) for d in drafters for k in ks), Mode(registry.ADAPTIVE, auto_max or defaults.AUTO_DRAFT_MAX)]
    if temperature > 0:
        matching = [d for d in drafters if registry.Supports.SAMPLE_MATCH in registry.spec(d).supports]
        modes += [Mode(d, k, rule) for rule in ("keyed", "sample-match") for d in matching for k in ks]
    return modes


def run_bench(args: argparse.Namespace, engine_config: EngineConfig, pair: Pair | None = None) -> int:
    """The sweep the command line's arguments ask for, on the pair `engine_config` loads (the command line resolved it;
    `pair`: the catalog's, whose recommended p-min applies where --draft-p-min is not given)."""
    check_outputs(args)
    p_min = draft_p_min(args.draft_p_min, pair)
    ks = parse_ks(args.draft_max)
    reference_p_mins = parse_p_mins(args.reference_p_min)
    prompts = select_prompts(load_prompts(args.prompts), args.only)
    drafters = parse_drafters(args.drafters, _pair_parts(engine_config))
    modes = bench_modes(drafters, ks, args.temperature, args.auto_max)
    if args.lockstep and len(modes) != 2:
        raise UsageError("--lockstep runs plain decoding and auto a token each in turn, each on a context of its own: add "
                         "--drafters none (with fixed drafters, every mode would need a context of its own).")
    result = BenchResult(ks=ks, prompts=prompts, modes=modes, temperature=args.temperature, rounds=args.rounds, lockstep=args.lockstep)
    progress = BenchProgress(0)  # its count once the prompts left out are known
    progress.stage(f"{len(prompts)} prompts × {len(modes)} modes × {args.rounds} round(s); loading the pair")
    with Engine(engine_config) as engine, ExitStack() as stack:
        result.machine = {
            "localspec": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "threads": engine.target.n_threads, "target": engine.target.description,
            "draft": engine.draft.description if engine.draft is not None else None,
            "device": device_record(engine),
        }
        _leave_out_unrendered_tools(result, engine.target, progress)
        prompts = result.prompts
        _note_unconstrained_drafters(result, progress)
        if args.llama_cpp_bin and (held := [p.id for p in prompts if p.grammar is not None]):
            _note(result, progress, f"llama.cpp's tools would run without the grammar, so they skip {', '.join(held)}")
        progress.total = args.rounds * sum(len(result.modes_for(p)) for p in prompts)
        warmup = chat_prompt_tokens(engine.target, [Message("user", "Hello")])
        _say_self_draft(progress, engine_config, drafters)
        lockstep = None
        if args.lockstep:  # a second context on the target's weights (lockstep.py)
            lockstep = LockstepContexts(engine)
            stack.callback(lockstep.close)
        progress.stage("warming up every mode")
        for mode in result.modes:  # loads the self draft and times auto's costs before anything is measured
            for round_index in range(2 if lockstep else 1):  # on each context
                record((_decoder(engine, lockstep, mode, round_index), warmup, GenerationConfig(max_tokens=8, draft_max=mode.k)))
        depth = round(sum(len(chat_prompt_tokens(engine.target, p.messages, p.tool_request.offered)) for p in prompts) / len(prompts))
        result.matched_workload = (args.max_tokens, depth)
        try:
            _llama_bench(args, engine, result)
            for round_index in range(args.rounds):
                for index, prompt in enumerate(prompts):
                    _bench_prompt(args, engine, lockstep, prompt, index, reference_p_mins, round_index, result, progress, p_min)
                    write_json(args, result)
            _llama_bench(args, engine, result)
        except KeyboardInterrupt:
            result.keep_finished_prompts()
            progress.stage(f"interrupted (Ctrl-C): the report below holds the {len(result.measurements)} measurements of the "
                           "prompts that finished")
        costs = engine.decoder(registry.ADAPTIVE).drafter.measured().costs
        if costs is not None:
            result.verify_ms = dict(sorted(costs.target.ms.items()))
            result.verify_passes = dict(sorted(costs.target.observations.items()))
    if result.measurements:
        print_report(result)
    save_outputs(args, result)
    return 130 if result.interrupted else 0


def _note(result: BenchResult, progress: BenchProgress, text: str) -> None:
    """Something left out of the run: said as the bench starts, and again in the report and the JSON."""
    result.notes.append(text)
    progress.stage(text)


def _note_unconstrained_drafters(result: BenchResult, progress: BenchProgress) -> None:
    """A drafter that cannot draft under a grammar skips the prompts that have one (every other mode still runs them)."""
    held = [p.id for p in result.prompts if p.grammar is not None]
    if not held:
        return
    for drafter in dict.fromkeys(mode.drafter for mode in result.modes if registry.Supports.GRAMMAR not in mode.spec.supports):
        _note(result, progress, f"{drafter} cannot draft under a grammar, so it skips {', '.join(held)}")


def _leave_out_unrendered_tools(result: BenchResult, model: Model, progress: BenchProgress) -> None:
    """The prompts that offer tools are left out where the target's chat template cannot render them (the server refuses
    such a request); a UsageError where nothing is left."""
    if supports_tools(model):
        return
    offering = [p.id for p in result.prompts if p.tool_request.offered]
    if not offering:
        return
    result.prompts = [p for p in result.prompts if not p.tool_request.offered]
    why = f"the chat template of {model.path.name} does not render tools"
    if not result.prompts:
        raise UsageError(f"Every prompt chosen offers tools, and {why}: bench other prompts, or a target whose template renders tools.")
    _note(result, progress, f"{why}, so {', '.join(offering)} are left out")


def _bench_prompt(
    args: argparse.Namespace, engine: Engine, lockstep: LockstepContexts | None, prompt: BenchPrompt, index: int, reference_p_mins: list[float],
    round_index: int, result: BenchResult, progress: BenchProgress, p_min: float,
) -> None:
    """Every mode, then llama.cpp's example at each K: all of one prompt back to back, so drift hits all alike; in
    `lockstep` (--lockstep), both modes at once, a token each in turn, the lead and the contexts swapped from round to round.

    At temperature > 0 every mode samples with the same seed, so modes differ only in how they draft and verify.
    """
    tokens = chat_prompt_tokens(engine.target, prompt.messages, prompt.tool_request.offered)
    modes = result.modes_for(prompt)
    shift = round_index % len(modes)
    sampling = SamplingParams(temperature=args.temperature, seed=args.seed + index)
    order = modes[shift:] + modes[:shift]
    planned: list[Run] = []
    for mode in order:
        grammar = engine.target.grammar(prompt.grammar) if prompt.grammar is not None else None  # one answer's state: each run its own
        config = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling, draft_max=mode.k, draft_p_min=p_min,
                                  verification=mode.verification, record_margins=args.margins,  # type: ignore[arg-type]
                                  conversation=tuple(message_dicts(prompt.messages)), grammar=grammar)
        decoder = _decoder(engine, lockstep, mode, round_index)
        decoder.drafter.observe(NewSession())  # each prompt is a session of its own: a round's repeat is not drafted from memory
        planned.append((decoder, tokens, config))
    recorded = record_in_lockstep(planned) if lockstep is not None else [record(run) for run in planned]
    runs: dict[Mode, Measurement] = {}
    for mode, (out, margins, stats) in zip(order, recorded):
        runs[mode] = Measurement(prompt.id, mode, out, stats, margins=margins, text=engine.target.vocab.text(out))
        progress.measured(f"{prompt.id} · {mode.label}", stats.predicted_per_second)
    for m in runs.values():
        if sampling.greedy:
            m.departs_at = next((i for i, (a, b) in enumerate(zip(runs[PLAIN].tokens, m.tokens)) if a != b), None)
        result.measurements.append(m)
    costs = engine.decoder(registry.ADAPTIVE).drafter.measured().costs
    if sampling.greedy and prompt.id not in result.ceilings and costs is not None:
        auto_cap = max(mode.k for mode in modes if mode.adaptive)
        result.ceilings[prompt.id] = lookup_ceiling(tokens, runs[PLAIN].tokens, costs.verify, auto_cap)
    if args.llama_cpp_bin and not result.reference_error and sampling.greedy and prompt.grammar is None:
        text = render_chat(engine.target, prompt.messages, prompt.tool_request.offered)
        for drafter, spec_type in result.reference_drafters():
            row = registry.spec(drafter)
            draft = args.draft if row.needs_draft_model or registry.Part.EAGLE3_HEAD in row.requires else None  # MTP layers live in the target's file
            for k in result.ks:
                for p_min in reference_p_mins:
                    run = _reference_step(result, partial(reference.speculative_simple, args.llama_cpp_bin, args.target, draft, spec_type,
                                                          text, k, p_min, args.max_tokens, engine.target.n_threads, args.ctx_size))
                    if run is not None:
                        result.reference.append(ReferenceMeasurement(prompt.id, drafter, k, p_min, run))


def _decoder(engine: Engine, lockstep: LockstepContexts | None, mode: Mode, round_index: int) -> Decoder:
    """The decoder that runs `mode` in this round: in lockstep, on the context it takes this round (lockstep.py)."""
    return lockstep.decoder(mode, round_index) if lockstep is not None else engine.decoder(mode.drafter)


def _say_self_draft(progress: BenchProgress, config: EngineConfig, drafters: list[str]) -> None:
    """The self drafter writes a draft the size of a quarter of the target into the cache: say so before it does."""
    if not any(registry.Part.SELF_DRAFT in registry.spec(d).requires for d in drafters) or config.self_draft_dir is None:
        return
    path = self_draft_path(config.target, config.self_draft_layers, config.self_draft_dir, config.self_draft_floor)
    if not path.exists():
        progress.stage(f"the self drafter cuts a draft from the target into {path.parent} (made once, kept; "
                       "`localspec clean` removes it)")


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
