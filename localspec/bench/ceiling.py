"""The most prompt lookup could gain on an answer, given foresight: the bound the bench sets beside auto.

Replaying the plain answer, at each step it drafts exactly as much of the lookup
run as the target will accept (or nothing, where a shorter batch pays better),
at this machine's measured verify costs. No real drafter can beat it, so where
it sits below a goal, no choice of K or confidence rule can reach that goal
with prompt lookup on this machine; where auto sits far below it, there is room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from localspec.engine.drafters.ngram import PromptLookup


@dataclass(frozen=True)
class Ceiling:
    tokens: int
    plain_ms: float  # every token verified alone
    foresight_ms: float

    @property
    def ratio(self) -> float:
        """Plain's time over foresight's: 1.0 for an empty answer, where there is nothing to gain (and nothing to divide)."""
        return self.plain_ms / self.foresight_ms if self.foresight_ms else 1.0


def lookup_ceiling(prompt: Sequence[int], answer: Sequence[int], verify_ms: Callable[[int], float], k_cap: int) -> Ceiling:
    drafter = PromptLookup()
    drafter.start(prompt)
    position, spent = 0, 0.0
    while position < len(answer):
        run = drafter.lookup(k_cap).tokens
        agreed = 0  # the step's last token is always the target's own, so a run can cover all but the answer's last
        while agreed < len(run) and position + agreed + 1 < len(answer) and run[agreed] == answer[position + agreed]:
            agreed += 1
        k = max(range(agreed + 1), key=lambda n: (n + 1) / verify_ms(n + 1))
        spent += verify_ms(k + 1)
        drafter.advance(answer[position : position + k + 1])
        position += k + 1
    return Ceiling(len(answer), len(answer) * verify_ms(1), spent)


def combined(ceilings: Sequence[Ceiling]) -> Ceiling:
    return Ceiling(sum(c.tokens for c in ceilings), sum(c.plain_ms for c in ceilings), sum(c.foresight_ms for c in ceilings))
