"""The bench's printed tables: per prompt, then overall, then llama.cpp's tools beside ours."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from localspec.engine.cost_model import StepCosts
from localspec.engine.stats import GenerationStats

if TYPE_CHECKING:
    from localspec.bench.runner import BenchResult, Measurement


def _label(k: int) -> str:
    return "plain" if k == 0 else f"K={k}"


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


def _row(label: str, k: int, stats: GenerationStats, plain: GenerationStats, departs: str) -> str:
    ratio = stats.predicted_per_second / plain.predicted_per_second if plain.predicted_per_second else 0.0
    if k == 0:
        return f"{label:<18} {_label(k):>6} {stats.predicted_per_second:7.1f} {1.0:6.2f} {'':>7} {1.0:6.2f} {'':>24} {'':>6} {stats.python_ms_per_step:6.2f}  {departs}"
    positions = " ".join(f"{a:.2f}" for a in stats.acceptance_by_position[:6])
    predicted = costs_from(plain, stats).predicted_speedup(stats.draft_reach_by_position, stats.acceptance_by_position)
    pred = f"{predicted:6.2f}" if predicted is not None else f"{'-':>6}"
    return (
        f"{label:<18} {_label(k):>6} {stats.predicted_per_second:7.1f} {ratio:6.2f} {100 * stats.acceptance_rate:6.1f}% "
        f"{stats.tokens_per_step:6.2f} {positions:>24} {pred} {stats.python_ms_per_step:6.2f}  {departs}"
    )


HEADER = f"{'prompt':<18} {'mode':>6} {'tok/s':>7} {'×plain':>6} {'accept':>7} {'tok/pass':>6} {'acceptance by position':>24} {'pred×':>6} {'py ms':>6}  same as plain"


def print_report(result: BenchResult) -> None:
    by_prompt: dict[str, dict[int, list[Measurement]]] = defaultdict(lambda: defaultdict(list))
    for m in result.measurements:
        by_prompt[m.prompt_id][m.k].append(m)

    print("\nPer prompt (temperature 0; ×plain is measured, pred× is predicted from measured acceptance and costs)")
    print(HEADER)
    for prompt in result.prompts:
        modes = by_prompt[prompt.id]
        plain = GenerationStats.total(m.stats for m in modes[0])
        for k in [0, *result.ks]:
            runs = modes[k]
            departs = "yes"
            for m in runs:
                if m.departs_at is not None:
                    margin = m.margin_at_departure(modes[0][0])
                    departs = f"departs at token {m.departs_at}" + ("" if margin is None else f" (top-2 gap {margin:.3f})")
            print(_row(prompt.id if k == 0 else "", k, GenerationStats.total(m.stats for m in runs), plain, departs))

    print("\nOverall")
    print(HEADER)
    plain_all = GenerationStats.total(m.stats for m in result.measurements if m.k == 0)
    for k in [0, *result.ks]:
        runs = [m for m in result.measurements if m.k == k]
        identical = sum(m.departs_at is None for m in runs)
        print(_row("all prompts" if k == 0 else "", k, GenerationStats.total(m.stats for m in runs), plain_all, f"{identical}/{len(runs)} runs"))

    categories = sorted({p.category for p in result.prompts})
    if len(categories) > 1:
        print("\nBy category: speculative tok/s ÷ plain tok/s")
        print(f"{'category':<18} " + " ".join(f"{_label(k):>7}" for k in result.ks))
        for category in categories:
            ids = {p.id for p in result.prompts if p.category == category}
            plain = GenerationStats.total(m.stats for m in result.measurements if m.k == 0 and m.prompt_id in ids)
            cells = []
            for k in result.ks:
                spec = GenerationStats.total(m.stats for m in result.measurements if m.k == k and m.prompt_id in ids)
                cells.append(f"{spec.predicted_per_second / plain.predicted_per_second:7.2f}")
            print(f"{category:<18} " + " ".join(cells))

    if result.reference_error:
        print(f"\nllama.cpp comparison skipped: {result.reference_error}")
    if result.llama_bench_tg and result.reference and not result.reference_error:
        _print_llama_cpp_side_by_side(result, plain_all)


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
    for k in result.ks:
        ours = GenerationStats.total(m.stats for m in result.measurements if m.k == k)
        for p_min in sorted({r.p_min for r in result.reference}):
            runs = [r.run for r in result.reference if r.k == k and r.p_min == p_min]
            tokens = sum(r.n_predict for r in runs)
            seconds = sum(r.n_predict / r.tokens_per_second for r in runs if r.tokens_per_second)
            theirs = tokens / seconds if seconds else 0.0
            accept = sum(r.n_accept for r in runs) / max(1, sum(r.n_drafted for r in runs))
            print(
                f"K={k}: llama-speculative-simple (p-min {p_min:.2f}) {theirs:6.1f} tok/s ({100 * accept:5.1f}% accepted)   "
                f"localspec {ours.predicted_per_second:6.1f} tok/s ({100 * ours.acceptance_rate:5.1f}% accepted)   "
                f"ratio {ours.predicted_per_second / theirs if theirs else 0.0:.2f}"
            )
