"""How often each draft position is accepted, learned with decay, so a change of text shows within a few steps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.tuning import ACCEPTANCE_DECAY, ACCEPTANCE_PRIOR_WEIGHT


def prefix_curves(rates: Sequence[float]) -> tuple[list[float], list[float]]:
    """For j = 0..len(rates), given each position's chance to survive when the ones before it did: the expected tokens
    accepted among the first j, and the chance that all j are (one pass gives every K a controller weighs)."""
    expected, survive = [0.0], [1.0]
    held, total = 1.0, 0.0
    for rate in rates:
        held *= rate
        total += held
        survive.append(held)
        expected.append(total)
    return expected, survive


@dataclass
class AcceptanceModel:
    """How often draft position i survives, given that the positions before it did; decayed counts with a prior."""

    prior: float  # the rate assumed before any evidence
    hits: list[float] = field(default_factory=list)
    tries: list[float] = field(default_factory=list)
    decay: float = ACCEPTANCE_DECAY  # per observation (1: every observation counts alike, as an offline replay's known rates do)
    # Each position leans on every position's evidence together (the pooled rate) where its own is thin, not on the
    # prior alone: for positions that are alike, such as a copy's tokens past its first few (agreement.py).
    pooled: bool = False
    # Another model that every observation here also teaches: the draft model's confidence classes each teach what the
    # draft shows in all of them together (confidence.ConfidenceClasses.overall).
    also_teaches: AcceptanceModel | None = None

    def rate(self, i: int) -> float:
        return self.rates(i + 1)[i]

    def rates(self, k: int, lean: float | None = None) -> list[float]:
        """The rates of positions 0..k-1. A position past all evidence takes the last one's rate, or the pooled rate.
        `lean`: what thin evidence leans on in place of the prior (or the pooled rate)."""
        if lean is None:
            lean = self.pooled_rate() if self.pooled else self.prior
        rates = [(hits + ACCEPTANCE_PRIOR_WEIGHT * lean) / (tries + ACCEPTANCE_PRIOR_WEIGHT) for hits, tries in zip(self.hits[:k], self.tries[:k])]
        beyond = lean if self.pooled or not rates else rates[-1]
        return rates + [beyond] * (k - len(rates))

    def pooled_rate(self) -> float:
        """Every position's evidence together, with the prior."""
        return (sum(self.hits) + ACCEPTANCE_PRIOR_WEIGHT * self.prior) / (sum(self.tries) + ACCEPTANCE_PRIOR_WEIGHT)

    def expected_accepted(self, k: int) -> float:
        return self.prefix_curves(k)[0][k]

    def prefix_curves(self, k: int, lean: float | None = None) -> tuple[list[float], list[float]]:
        return prefix_curves(self.rates(k, lean))

    def observe_asked(self, n_drafted: int, n_accepted: int) -> None:
        """A step that asked a drafter for tokens: one that offered none (a draft model unsure of its first token, under
        p-min) paid its decode for no token, a miss at the first position. Left out, a draft mostly silent on prose was
        rated by its few sure tokens, and kept being asked. A stop after the first token is left unjudged: the step that
        stops early also costs less than the K it was priced at (fewer draft passes, a shorter verify), and counted as a
        miss at the priced cost it drove K down where p-min's trimming was nearly free (Q8_0 code 1.53x -> 1.44x)."""
        self.observe(max(1, n_drafted), n_accepted)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        self.observe_positions(0, min(n_drafted, n_accepted), missed=n_accepted < n_drafted)

    def observe_positions(self, start: int, held: int, missed: bool) -> None:
        """Positions start..held-1 held; `missed`: position `held` was then rejected (positions past it were never judged)."""
        if self.also_teaches is not None:
            self.also_teaches.observe_positions(start, held, missed)
        end = held + 1 if missed else held
        while len(self.tries) < end:
            self.hits.append(0.0)
            self.tries.append(0.0)
        for i in range(start, end):
            self.tries[i] = self.decay * self.tries[i] + 1
            self.hits[i] = self.decay * self.hits[i] + (1 if i < held else 0)

    def evidence_rate(self) -> float:
        """The first position's rate on the evidence alone, no prior (0 without any)."""
        return self.hits[0] / self.tries[0] if self.tries else 0.0

    def carry_over(self, weight: float) -> None:
        """A new answer: what earlier ones taught stays its belief, worth at most `weight` observations per position, so
        this answer's own evidence outweighs it within a few steps. Carried at full weight, a draft accepted 43 times in
        44 on code took a dozen silent asks on a haiku that followed to stop being asked, most of a 22-token answer."""
        for i, tries in enumerate(self.tries):
            if tries > weight:
                self.hits[i] *= weight / tries
                self.tries[i] = weight
