"""The target's plain decoding speed now, the baseline of every "× plain" figure, and the speedup measured against it.

Timed at load, it would keep whatever the machine was doing then: a load beside a busy job read 0.2 tok/s, and every
answer after it looked many times faster than plain. So each answer's own one-token passes (plain steps, whatever
drafter ran), with the Python time around its steps, move the baseline to what plain decoding costs now.

The baseline is the unconstrained target's step. An answer held to a grammar is measured against the constrained
target, the same grammar's masks included: its plain rate adds the grammar's time per row to the baseline, and its
own steps give the baseline their Python time without the grammar's. One formula for every door: the server's
responses and log line, the app's panel and `generate`'s summary.
"""

from __future__ import annotations

from localspec.engine.stats import GenerationStats

PASS_WEIGHT = 0.05  # each one-token pass's pull on the baseline: about the last 20-60 passes decide it


def plain_steps(stats: GenerationStats) -> tuple[int, float]:
    """An answer's one-token passes: how many, and what an unconstrained plain step cost on average (the Python around a
    step included, the grammar's own time per step not: a grammar is the answer's cost, added by `plain_ms_for`)."""
    count, ms = stats.verify_ms_by_batch.get(1, (0, 0.0))
    if not count:
        return 0, 0.0
    grammar_ms_per_step = stats.t_grammar_ms / stats.n_steps if stats.n_steps else 0.0
    return int(count), ms / count + max(0.0, stats.python_ms_per_step - grammar_ms_per_step)


def updated_plain_ms(plain_ms_per_token: float, stats: GenerationStats) -> float:
    """The baseline after an answer: unchanged where the answer took no one-token pass."""
    count, step_ms = plain_steps(stats)
    if not count:
        return plain_ms_per_token
    if not plain_ms_per_token:
        return step_ms
    pull = 1 - (1 - PASS_WEIGHT) ** count
    return plain_ms_per_token + pull * (step_ms - plain_ms_per_token)


def plain_ms_for(stats: GenerationStats, plain_ms_per_token: float) -> float:
    """What a plain step costs the target this answer ran on: the baseline, plus its grammar's time per row where one held
    the answer (0.0: no baseline yet)."""
    return plain_ms_per_token + stats.grammar_ms_per_row if plain_ms_per_token > 0 else 0.0


def plain_rate_for(stats: GenerationStats, plain_ms_per_token: float) -> float | None:
    """The constrained target's plain rate for this answer, in tokens per second; None without a baseline."""
    ms = plain_ms_for(stats, plain_ms_per_token)
    return 1000.0 / ms if ms > 0 else None


def speedup(stats: GenerationStats, plain_ms_per_token: float, tokens_per_second: float | None = None) -> float | None:
    """The answer's rate (`tokens_per_second`, else its own over its whole time) over its plain rate; None without a
    baseline."""
    plain = plain_rate_for(stats, plain_ms_per_token)
    rate = stats.predicted_per_second if tokens_per_second is None else tokens_per_second
    return rate / plain if plain else None
