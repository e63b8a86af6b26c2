"""The target's plain decoding speed now, the baseline of every "× plain" figure.

Timed at load, it would keep whatever the machine was doing then: a load beside a busy job read 0.2 tok/s, and every
answer after it looked many times faster than plain. So each answer's own one-token passes (plain steps, whatever
drafter ran), with the Python time around its steps, move the baseline to what plain decoding costs now.
"""

from __future__ import annotations

from localspec.engine.stats import GenerationStats

PASS_WEIGHT = 0.05  # each one-token pass's pull on the baseline: about the last 20-60 passes decide it


def plain_steps(stats: GenerationStats) -> tuple[int, float]:
    """An answer's one-token passes: how many, and what a plain step cost on average (the Python around a step included)."""
    count, ms = stats.verify_ms_by_batch.get(1, (0, 0.0))
    return int(count), (ms / count + max(0.0, stats.python_ms_per_step) if count else 0.0)


def updated_plain_ms(plain_ms_per_token: float, stats: GenerationStats) -> float:
    """The baseline after an answer: unchanged where the answer took no one-token pass."""
    count, step_ms = plain_steps(stats)
    if not count:
        return plain_ms_per_token
    if not plain_ms_per_token:
        return step_ms
    pull = 1 - (1 - PASS_WEIGHT) ** count
    return plain_ms_per_token + pull * (step_ms - plain_ms_per_token)
