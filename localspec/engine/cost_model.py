"""What a draft of up to K tokens should buy, from measured acceptance and measured costs.

Speculation pays only when the tokens a step settles outweigh what the step
costs: the drafted tokens plus one target pass over them and one more. The
bench shows this prediction beside the measured speedup, so the model is
checked against reality on every run.

Both inputs are per draft position i, as the statistics keep them:
- reach[i]: the share of steps whose draft got as far as position i (1 for
  every i < K without a confidence cut-off);
- accepted[i]: among those, the share whose tokens 0..i were all accepted
  (llama.cpp's n_acc_tokens_per_pos, cumulative, not conditional).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def expected_tokens_per_step(reach: Sequence[float], accepted: Sequence[float]) -> float:
    """1 (the target's own token) plus the expected number of accepted draft tokens."""
    return 1.0 + sum(r * a for r, a in zip(reach, accepted))


def draft_length_distribution(reach: Sequence[float]) -> list[float]:
    """P(draft length = j) for j = 0..len(reach), from the share of steps reaching each position."""
    bounds = [1.0, *reach, 0.0]
    return [max(0.0, bounds[j] - bounds[j + 1]) for j in range(len(reach) + 1)]


@dataclass(frozen=True)
class StepCosts:
    """Measured milliseconds: one plain token, one drafted token, and a target pass per batch size."""

    plain_token_ms: float
    draft_token_ms: float
    verify_ms: dict[int, float]
    overhead_ms: float = 0.0  # per step, outside the draft and the target pass

    def predicted_speedup(self, reach: Sequence[float], accepted: Sequence[float]) -> float | None:
        """Expected speculative tok/s over plain tok/s; None if a needed verify size was never measured."""
        verify = 0.0
        for length, share in enumerate(draft_length_distribution(reach)):
            if share > 0.0:
                if length + 1 not in self.verify_ms:
                    return None
                verify += share * self.verify_ms[length + 1]
        step_ms = sum(reach) * self.draft_token_ms + verify + self.overhead_ms
        if self.plain_token_ms <= 0 or step_ms <= 0:
            return None
        return expected_tokens_per_step(reach, accepted) * self.plain_token_ms / step_ms
