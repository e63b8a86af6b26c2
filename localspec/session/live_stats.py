"""The statistics panel's numbers, kept up to date from the decode loop's own counters.

Everything here is derived from `GenerationStats` (exact counters the loop keeps
anyway) and a clock, so watching costs a few arithmetic operations per token.
The speedup is measured, not guessed: it divides the answer's rate by the
target's plain rate (session/plain_rate.py), the baseline moved by any plain step the answer takes, and under a
grammar the constrained target's, its masks included.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from localspec.engine.events import TokenEvent
from localspec.engine.stats import GenerationStats, SourceShare
from localspec.session.plain_rate import plain_rate_for, speedup, updated_plain_ms

SPARK_STEPS = 48  # acceptance of the last steps, for the sparkline
RATE_WINDOW_S = 1.5  # "tokens/s now" looks this far back


@dataclass(frozen=True)
class StatsSnapshot:
    generated: int
    acceptance_answer: float | None  # None until something was drafted
    acceptance_conversation: float | None
    tokens_per_pass: float
    acceptance_by_position: list[float]
    recent_acceptance: list[float]  # per step, newest last
    tokens_per_second_now: float
    tokens_per_second_avg: float
    plain_tokens_per_second: float | None  # under a grammar, the constrained target's
    speedup: float | None
    t_draft_ms: float
    t_verify_ms: float
    t_other_ms: float
    drafter: str
    draft_max: int
    by_source: list[SourceShare]  # auto's steps and tokens by what drafted them (empty for any other drafter)
    prompt_tokens: int
    context_used: int
    n_ctx: int
    # Under a grammar: the share kept of its forced text and of the drafter's own tokens ({"grammar": 1.0, "auto": 0.7}),
    # the forced tokens drafted and kept, and the grammar's time per masked row (None: no grammar holds the answer)
    acceptance_by_source: dict[str, float] = field(default_factory=dict)
    forced_n: int = 0
    forced_n_accepted: int = 0
    grammar_ms_per_row: float | None = None


class LiveStats:
    def __init__(self, n_ctx: int, plain_ms_per_token: float | None, conversation_drafted: int = 0,
                 conversation_accepted: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.n_ctx = n_ctx
        self.plain_ms_per_token = plain_ms_per_token
        self._conversation = (conversation_drafted, conversation_accepted)
        self._clock = clock
        self._created = clock()
        self._recent: deque[float] = deque(maxlen=SPARK_STEPS)
        self._rate_samples: deque[tuple[float, int]] = deque()
        self._step = 0
        self._step_counts = (0, 0)

    def observe(self, event: TokenEvent) -> None:
        """Call once per token event: the statistics it carries feed the recent acceptance and the current rate."""
        stats = event.stats
        if event.step != self._step:
            drafted, accepted = stats.draft_n - self._step_counts[0], stats.draft_n_accepted - self._step_counts[1]
            if drafted:
                self._recent.append(accepted / drafted)
            self._step = event.step
            self._step_counts = (stats.draft_n, stats.draft_n_accepted)
        now = self._clock()
        self._rate_samples.append((now, stats.predicted_n))
        while len(self._rate_samples) > 2 and now - self._rate_samples[0][0] > RATE_WINDOW_S:
            self._rate_samples.popleft()

    def snapshot(self, stats: GenerationStats, context_used: int) -> StatsSnapshot:
        now = self._clock()
        elapsed_ms = max(1e-6, (now - self._created) * 1000 - stats.prompt_ms)
        average = stats.predicted_n / (elapsed_ms / 1000)
        (t0, n0), (t1, n1) = (self._rate_samples[0], self._rate_samples[-1]) if self._rate_samples else ((now, 0), (now, 0))
        current = (n1 - n0) / (t1 - t0) if t1 > t0 else average
        plain_ms = updated_plain_ms(self.plain_ms_per_token or 0.0, stats)
        drafted = self._conversation[0] + stats.draft_n
        accepted = self._conversation[1] + stats.draft_n_accepted
        return StatsSnapshot(
            generated=stats.predicted_n,
            acceptance_answer=stats.acceptance_rate if stats.draft_n else None,
            acceptance_conversation=accepted / drafted if drafted else None,
            tokens_per_pass=stats.tokens_per_step,
            acceptance_by_position=stats.acceptance_by_position,
            recent_acceptance=list(self._recent),
            tokens_per_second_now=current,
            tokens_per_second_avg=average,
            plain_tokens_per_second=plain_rate_for(stats, plain_ms),
            speedup=speedup(stats, plain_ms, average),
            t_draft_ms=stats.t_draft_ms,
            t_verify_ms=stats.t_verify_ms,
            t_other_ms=max(0.0, elapsed_ms - stats.t_draft_ms - stats.t_verify_ms),
            drafter=stats.drafter,
            draft_max=stats.draft_max,
            by_source=stats.by_source,
            prompt_tokens=stats.prompt_n,
            context_used=context_used,
            n_ctx=self.n_ctx,
            acceptance_by_source=stats.acceptance_by_source if stats.forced_n else {},
            forced_n=stats.forced_n,
            forced_n_accepted=stats.forced_n_accepted,
            grammar_ms_per_row=stats.grammar_ms_per_row if stats.grammar_rows else None,
        )
