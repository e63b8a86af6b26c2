"""The bench's printed tables: per prompt, overall, by category (auto against the best fixed choice), then llama.cpp beside ours."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from localspec.bench.ceiling import combined
from localspec.bench.consistency import MARK, Doubts
from localspec.bench.results import PLAIN, BenchResult, Measurement, Mode
from localspec.engine.cost_model import StepCosts
from localspec.engine.drafters import registry
from localspec.engine.stats import GenerationStats


def costs_from(plain: GenerationStats, spec: GenerationStats) -> StepCosts:
    verify = {batch: ms / count for batch, (count, ms) in spec.verify_ms_by_batch.items() if count}
    decode_ms = sum(ms for _, ms in spec.verify_ms_by_batch.values())
    overhead = (spec.predicted_ms - spec.t_draft_ms - decode_ms) / spec.n_steps if spec.n_steps else 0.0
    return StepCosts(
        plain_token_ms=plain.predicted_ms / plain.predicted_n if plain.predicted_n else 0.0,
        draft_token_ms=spec.t_draft_ms / spec.draft_n if spec.draft_n else 0.0,
        verify_ms=verify,
        overhead_ms=overhead,
    )


def ratio(stats: GenerationStats, plain: GenerationStats) -> float:
    return stats.predicted_per_second / plain.predicted_per_second if plain.predicted_per_second else 0.0


def middle_ratio(rounds: list[float], lockstep: bool) -> float:
    """A prompt's auto × plain over its rounds (in round order): their median; in lockstep, the geometric mean of each
    arrangement's median. A lockstep round puts each mode on one of two contexts, swapped (with the lead) from round to
    round, and the contexts differ a little: over 18 prompts where auto drafted nothing, the odd rounds' median was 0.983
    and the even rounds' 0.995 in one run, 0.992 and 0.985 in another. With an odd number of rounds the plain median
    takes the side of the arrangement that ran more often; each arrangement weighed alike, a fixed factor between the
    contexts cancels (c·R and R/c give R)."""
    if lockstep and len(rounds) > 1:
        return math.sqrt(statistics.median(rounds[0::2]) * statistics.median(rounds[1::2]))
    return statistics.median(rounds)


def total(measurements: Iterable[Measurement]) -> GenerationStats:
    return GenerationStats.total(m.stats for m in measurements)


def plain_beside(result: BenchResult, runs: Iterable[Measurement]) -> GenerationStats:
    """Plain decoding on the prompts `runs` are of: a mode that skipped some prompts (a drafter that cannot draft under a
    grammar) is compared with plain on those it ran."""
    ids = {m.prompt_id for m in runs}
    return total(m for m in result.measurements if m.mode == PLAIN and m.prompt_id in ids)


def grammar_ms_per_pass(runs: Iterable[Measurement]) -> float | None:
    """The grammar's own time (masks, forced text, following the answer) per target pass, over the runs that had a grammar;
    None where none had one."""
    held = total(m for m in runs if m.stats.grammar_rows)
    return held.t_grammar_ms / held.n_steps if held.n_steps else None


def _grammar_column(ms: float | None) -> str:
    return f"{ms:7.2f}" if ms is not None else f"{'-':>7}"


def _row(label: str, mode: Mode, stats: GenerationStats, plain: GenerationStats, departs: str, doubts: Doubts, where: str,
         grammar_ms: float | None = None) -> str:
    if mode.plain:
        return (f"{label:<20} {mode.label:>22} {stats.predicted_per_second:7.1f} {1.0:6.2f}  {'':>7} {1.0:6.2f} {'':>24} {'':>6} "
                f"{stats.python_ms_per_step:6.2f} {_grammar_column(grammar_ms)}  {departs}")
    positions = " ".join(f"{a:.2f}" for a in stats.acceptance_by_position[:6])
    predicted = None
    if mode.fixed and registry.Supports.FORK not in mode.spec.supports:  # a chain of drafted tokens: what the cost model describes
        predicted = costs_from(plain, stats).predicted_speedup(stats.draft_reach_by_position, stats.acceptance_by_position)
    pred = f"{predicted:6.2f}" if predicted is not None else f"{'-':>6}"
    mark = doubts.speedup(f"{where}, {mode.label}", ratio(stats, plain), stats.tokens_per_step)
    return (
        f"{label:<20} {mode.label:>22} {stats.predicted_per_second:7.1f} {ratio(stats, plain):6.2f}{mark} {100 * stats.acceptance_rate:6.1f}% "
        f"{stats.tokens_per_step:6.2f} {positions:>24} {pred} {stats.python_ms_per_step:6.2f} {_grammar_column(grammar_ms)}  {departs}"
    )


HEADER = (
    f"{'prompt':<20} {'mode':>22} {'tok/s':>7} {'×plain':>7} {'accept':>7} {'tok/pass':>6} {'acceptance by position':>24} "
    f"{'pred×':>6} {'py ms':>6} {'gram ms':>7}  same as plain"
)


def print_report(result: BenchResult) -> None:
    greedy = result.temperature <= 0
    by_prompt: dict[str, dict[Mode, list[Measurement]]] = defaultdict(lambda: defaultdict(list))
    for m in result.measurements:
        by_prompt[m.prompt_id][m.mode].append(m)

    doubts = Doubts()
    costs_doubted = doubts.costs(result.verify_ms)  # the lookup ceiling is priced with them: withheld where they contradict themselves
    condition = "temperature 0" if greedy else f"temperature {result.temperature:g}, the same seed for every mode of a prompt"
    if result.lockstep:
        condition += "; plain and auto in lockstep, a token each in turn"
    print(f"\nPer prompt ({condition}; ×plain is measured, pred× is predicted from measured acceptance and costs; gram ms is "
          "the grammar's time per pass, where the prompt asks for structured output)")
    print(HEADER)
    for prompt in result.prompts:
        modes = by_prompt[prompt.id]
        plain = total(modes[PLAIN])
        for mode in result.modes_for(prompt):
            departs = "yes" if greedy else "-"
            for m in modes[mode]:
                if m.departs_at is not None:
                    margin = m.margin_at_departure(modes[PLAIN][0])
                    departs = f"departs at token {m.departs_at}" + ("" if margin is None else f" (top-2 gap {margin:.3f})")
            print(_row(prompt.id if mode == PLAIN else "", mode, total(modes[mode]), plain, departs, doubts, prompt.id,
                       grammar_ms_per_pass(modes[mode])))

    skipping = any(len(result.modes_for(prompt)) < len(result.modes) for prompt in result.prompts)
    print("\nOverall" + (" (each mode beside plain on the prompts it ran)" if skipping else ""))
    print(HEADER)
    plain_all = total(m for m in result.measurements if m.mode == PLAIN)
    for mode in result.modes:
        runs = [m for m in result.measurements if m.mode == mode]
        identical = f"{sum(m.departs_at is None for m in runs)}/{len(runs)} runs" if greedy else "-"
        print(_row("all prompts" if mode == PLAIN else "", mode, total(runs), plain_beside(result, runs), identical, doubts, "all prompts",
                   grammar_ms_per_pass(runs)))

    _print_categories(result, doubts, costs_doubted)
    _print_auto(result, costs_doubted)
    if not greedy:
        _print_verification(result)
    if result.reference_error:
        print(f"\nllama.cpp comparison skipped: {result.reference_error}")
    if result.llama_bench_tg and result.reference and not result.reference_error:
        _print_llama_cpp_side_by_side(result, plain_all)
    for note in result.notes:
        print(f"\nLeft out: {note}.")
    doubts.print()


@dataclass(frozen=True)
class CategoryRow:
    category: str
    plain_per_second: float
    best: Mode | None  # the fastest fixed drafter and K
    best_ratio: float  # its tok/s ÷ plain tok/s
    best_tokens_per_pass: float
    auto_ratio: float
    auto_tokens_per_pass: float
    ceiling_ratio: float | None  # prompt lookup with foresight (greedy runs only)


def category_table(result: BenchResult) -> list[CategoryRow]:
    """Per category: plain tok/s, the best fixed mode and its ×plain, auto's ×plain, and the lookup ceiling."""
    rows = []
    auto_modes = [mode for mode in result.modes if mode.adaptive]
    for category in sorted({p.category for p in result.prompts}):
        ids = {p.id for p in result.prompts if p.category == category}
        in_category = [m for m in result.measurements if m.prompt_id in ids]
        plain = total(m for m in in_category if m.mode == PLAIN)
        fixed = [(ratio(total(runs), plain_beside(result, runs)), total(runs).tokens_per_step, mode) for mode in result.modes if mode.fixed
                 for runs in [[m for m in in_category if m.mode == mode]] if runs]
        best_ratio, best_per_pass, best = max(fixed, key=lambda row: row[0]) if fixed else (0.0, 0.0, None)
        auto = total(m for m in in_category if m.mode in auto_modes)
        auto_ratio = ratio(auto, plain) if auto_modes else 0.0
        ceilings = [c for prompt_id, c in result.ceilings.items() if prompt_id in ids]
        rows.append(CategoryRow(category, plain.predicted_per_second, best, best_ratio, best_per_pass, auto_ratio, auto.tokens_per_step,
                                combined(ceilings).ratio if ceilings else None))
    return rows


@dataclass(frozen=True)
class GrammarSide:
    """One mode's work under a grammar, over a category's structured prompts."""

    tokens_per_second: float
    tokens_per_pass: float
    ms_per_pass: float  # the grammar's own time (masks, forced text, following the answer) per target pass
    ms_per_row: float  # ...per verify row it masked
    forced_n: int  # tokens of forced text drafted
    forced_n_accepted: int

    @classmethod
    def of(cls, stats: GenerationStats) -> GrammarSide:
        return cls(stats.predicted_per_second, stats.tokens_per_step, stats.t_grammar_ms / stats.n_steps if stats.n_steps else 0.0,
                   stats.grammar_ms_per_row, stats.forced_n, stats.forced_n_accepted)


@dataclass(frozen=True)
class GrammarRow:
    category: str
    prompts: list[str]  # those of the category that ask for structured output
    plain: GrammarSide
    auto: GrammarSide | None  # None: not measured yet (the JSON is written as each prompt finishes)
    auto_ratio: float | None


def grammar_table(result: BenchResult) -> list[GrammarRow]:
    """Per category with structured prompts: plain and auto on those prompts, the grammar's time beside their speed."""
    rows = []
    for category in sorted({p.category for p in result.prompts if p.grammar is not None}):
        ids = [p.id for p in result.prompts if p.category == category and p.grammar is not None]
        runs = [m for m in result.measurements if m.prompt_id in ids]
        plain = total(m for m in runs if m.mode == PLAIN)
        autos = [m for m in runs if m.mode.adaptive]
        auto = total(autos) if autos else None
        rows.append(GrammarRow(category, ids, GrammarSide.of(plain), GrammarSide.of(auto) if auto else None,
                               ratio(auto, plain) if auto else None))
    return rows


def _print_grammar(result: BenchResult) -> None:
    rows = grammar_table(result)
    if not rows:
        return
    print("Under a grammar: the grammar's own time (masks, forced text, following the answer) per target pass and per row it masked")
    for row in rows:
        plain = row.plain
        line = (f"  {row.category} ({len(row.prompts)} prompt{'s' if len(row.prompts) != 1 else ''}): plain {plain.tokens_per_second:.1f} tok/s, "
                f"{plain.ms_per_pass:.2f} ms a pass ({plain.ms_per_row:.3f} ms a row)")
        if row.auto is not None and row.auto_ratio is not None:
            auto = row.auto
            kept = f", {100 * auto.forced_n_accepted / auto.forced_n:.1f}% kept" if auto.forced_n else ""
            line += (f"; auto × plain {row.auto_ratio:.2f}, {auto.tokens_per_pass:.2f} tok/pass, {auto.ms_per_pass:.2f} ms a pass "
                     f"({auto.ms_per_row:.3f} ms a row), {auto.forced_n} forced tokens drafted{kept}")
        print(line)


def _print_categories(result: BenchResult, doubts: Doubts, costs_doubted: bool) -> None:
    print("\nBy category: tok/s ÷ plain tok/s, auto against the best fixed drafter and K, and what lookup alone could reach with foresight")
    print(f"{'category':<18} {'plain tok/s':>11} {'best fixed':>22} {'×plain':>8} {'auto ×plain':>12} {'auto ÷ best':>11} {'ceiling':>8}")
    for row in category_table(result):
        share = f"{row.auto_ratio / row.best_ratio:11.2f}" if row.best_ratio else f"{'-':>11}"
        ceiling = f"{row.ceiling_ratio:8.2f}" if row.ceiling_ratio is not None and not costs_doubted else f"{'-':>8}"
        best_mark = doubts.speedup(f"{row.category}, {row.best.label}", row.best_ratio, row.best_tokens_per_pass) if row.best else " "
        best_ratio = f"{row.best_ratio:7.2f}{best_mark}" if row.best else f"{'-':>8}"
        auto_mark = doubts.speedup(f"{row.category}, auto", row.auto_ratio, row.auto_tokens_per_pass)
        print(f"{row.category:<18} {row.plain_per_second:11.1f} {row.best.label if row.best else '-':>22} {best_ratio} "
              f"{row.auto_ratio:11.2f}{auto_mark} {share} {ceiling}")
    _print_grammar(result)
    auto_runs = [m for m in result.measurements if m.mode.adaptive]
    if not auto_runs:
        return
    lines, medians = [], []
    for prompt in result.prompts:
        plains = [m.stats for m in result.measurements if m.prompt_id == prompt.id and m.mode == PLAIN]
        autos = [m.stats for m in auto_runs if m.prompt_id == prompt.id]
        rounds = [ratio(a, p) for a, p in zip(autos, plains)]  # both lists are in round order
        if not rounds:
            continue
        medians.append((middle_ratio(rounds, result.lockstep), prompt.id))
        prompt_ceiling = None if costs_doubted else result.ceilings.get(prompt.id)
        together = GenerationStats.total(autos)
        mark = doubts.speedup(f"{prompt.id}, auto", ratio(together, GenerationStats.total(plains)), together.tokens_per_step)
        lines.append(f"  {prompt.id:<26} {ratio(together, GenerationStats.total(plains)):5.2f}{mark} "
                     f"median {medians[-1][0]:5.2f} ({min(rounds):.2f}-{max(rounds):.2f})"
                     + (f"  ceiling {prompt_ceiling.ratio:.2f}, median ÷ ceiling {medians[-1][0] / prompt_ceiling.ratio:.2f}" if prompt_ceiling else ""))
    if medians:
        slowest = min(medians)
        arranged = ", each context's median weighed alike" if result.lockstep and result.rounds > 1 else ""
        print(f"auto's slowest prompt: {slowest[1]} at {slowest[0]:.2f} × plain (median of {result.rounds} round(s){arranged})")
    print("auto × plain per prompt: all rounds together, the median round and the range; the lookup ceiling, and the median's share of it"
          + (" (in lockstep the median is each context's median round, their geometric mean)" if result.lockstep and result.rounds > 1 else ""))
    print("\n".join(lines))


def _print_auto(result: BenchResult, costs_doubted: bool) -> None:
    runs = [m for m in result.measurements if m.mode.adaptive]
    if not runs:
        return
    stats = total(runs)
    print("\nauto's decisions (steps per choice) and its prediction against what it got")
    shares = sorted(stats.decisions.items(), key=lambda item: -item[1])
    steps = sum(stats.decisions.values()) or 1
    print("  " + ", ".join(f"{label} {100 * n / steps:.0f}%" for label, n in shares[:8]))
    dear = sorted(stats.draft_ms_by_decision.items(), key=lambda item: -item[1])
    print("  drafting time per choice: " + ", ".join(f"{label} {ms:.0f} ms" for label, ms in dear[:6]))
    predicted = stats.predicted_tokens_per_step
    if predicted is not None:
        print(f"  tokens per step: predicted {predicted:.2f}, got {stats.tokens_per_step:.2f}")
    if result.verify_ms and 1 in result.verify_ms:
        one = result.verify_ms[1]
        print("  the target's verify cost by batch size (auto's table: timed at load, then learned from the passes auto ran, so a "
              "size it never ran keeps what its few passes showed)" + (f" {MARK} contradicts itself, see the end:" if costs_doubted else ":"))
        print("  " + ", ".join(f"{n}: {ms:.0f} ms ({ms / one:.2f}×{_passes(result.verify_passes.get(n))})" for n, ms in result.verify_ms.items()))


def _passes(count: float | None) -> str:
    """How many passes taught a size's cost (a result saved before the counts were kept has none)."""
    if count is None:
        return ""
    return f", {count:.0f} pass" + ("" if round(count) == 1 else "es")


_RULES = (("speculative", "speculative sampling"), ("keyed", "keyed draws"), ("sample-match", "sample-and-match"))


def _print_verification(result: BenchResult) -> None:
    """At temperature > 0: speculative sampling (unseeded requests' rule), keyed draws (seeded requests': the answer
    repeats whatever drafts it) and sample-and-match, with the same draft model, K, prompts and seeds."""
    print("\nVerification at the same temperature, prompts and seeds: draft tokens accepted, in all and per token emitted")
    for k in result.ks:
        parts = []
        for rule, name in _RULES:
            s = total(m for m in result.measurements
                      if registry.Supports.SAMPLE_MATCH in m.mode.spec.supports and m.mode.k == k and m.mode.verification == rule)
            if s.draft_n:
                parts.append(f"{name} {s.draft_n_accepted} of {s.draft_n} ({100 * s.acceptance_rate:5.1f}%, "
                             f"{s.draft_n_accepted / s.predicted_n:.2f} per token emitted, {s.tokens_per_step:.2f} tok/pass)")
        if len(parts) > 1:
            print(f"K={k}: " + "   ".join(parts))


def _mean_rate(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _print_llama_cpp_side_by_side(result: BenchResult, plain_all: GenerationStats) -> None:
    tg = _mean_rate(result.llama_bench_tg)
    matched = _mean_rate(result.llama_bench_matched)
    n_gen, depth = result.matched_workload
    ours_plain = plain_all.predicted_per_second
    print("\nllama.cpp side by side (same models, prompts and K; interleaved per prompt in this run)")
    print(f"llama-bench tg64, empty context:          {tg:7.1f} tok/s  (runs: {', '.join(f'{v:.1f}' for v in result.llama_bench_tg)})")
    print(f"llama-bench tg{n_gen} @ d{depth} (our workload): {matched:7.1f} tok/s  (runs: {', '.join(f'{v:.1f}' for v in result.llama_bench_matched)})")
    print(f"localspec plain:                          {ours_plain:7.1f} tok/s  ({ours_plain / tg:.2f} × tg64, {ours_plain / matched:.2f} × our workload)")
    auto = total(m for m in result.measurements if m.mode.adaptive)
    for drafter, spec_type in result.reference_drafters():
        for k in result.ks:
            ours = total(m for m in result.measurements if m.mode.reference(drafter, k))
            for p_min in sorted({r.p_min for r in result.reference}):
                runs = [r.run for r in result.reference if r.drafter == drafter and r.k == k and r.p_min == p_min]
                if not runs:
                    continue
                tokens = sum(r.n_predict for r in runs)
                seconds = sum(r.n_predict / r.tokens_per_second for r in runs if r.tokens_per_second)
                theirs = tokens / seconds if seconds else 0.0
                accept = sum(r.n_accept for r in runs) / max(1, sum(r.n_drafted for r in runs))
                line = f"K={k}: llama-speculative-simple {spec_type} (p-min {p_min:.2f}) {theirs:6.1f} tok/s ({100 * accept:5.1f}% accepted)"
                if ours.n_steps:
                    ratio_to_theirs = ours.predicted_per_second / theirs if theirs else 0.0
                    line += (f"   localspec {drafter} {ours.predicted_per_second:6.1f} tok/s ({100 * ours.acceptance_rate:5.1f}% accepted), "
                             f"ratio {ratio_to_theirs:.2f}")
                if auto.n_steps:
                    line += f"   auto ratio {auto.predicted_per_second / theirs if theirs else 0.0:.2f}"
                print(line)
