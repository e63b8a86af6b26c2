"""What a draft length K should buy, from measured acceptance and measured costs.

Speculation pays only when the tokens a step settles outweigh what the step
costs: K draft tokens plus one target pass over K+1 tokens. The bench shows
this prediction beside the measured speedup, so the model is checked against
reality on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def expected_tokens_per_step(acceptance_by_position: Sequence[float], k: int) -> float:
    """1 (the target's own token) plus the expected accepted prefix of a K-token draft.

    `acceptance_by_position[i]` is the chance that token i is accepted given that
    tokens 0..i-1 were; positions never measured count as 0.
    """
    expected, survive = 1.0, 1.0
    for i in range(k):
        survive *= acceptance_by_position[i] if i < len(acceptance_by_position) else 0.0
        expected += survive
    return expected


@dataclass(frozen=True)
class StepCosts:
    """Measured milliseconds: one plain token, one drafted token, and a target pass per batch size."""

    plain_token_ms: float
    draft_token_ms: float
    verify_ms: dict[int, float]
    overhead_ms: float = 0.0  # per step, outside the draft and the target pass

    def predicted_speedup(self, acceptance_by_position: Sequence[float], k: int) -> float | None:
        verify = self.verify_ms.get(k + 1)
        if verify is None or self.plain_token_ms <= 0:
            return None
        step_ms = k * self.draft_token_ms + verify + self.overhead_ms
        return expected_tokens_per_step(acceptance_by_position, k) * self.plain_token_ms / step_ms
