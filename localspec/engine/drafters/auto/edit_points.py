"""Where one answer departs from what it copies: a pair of tokens it broke a copy at is likely to break the next one.

An edit of code repeats its kind (type hints after each parameter, a rename at each use), so each answer counts, per
token pair (the token before, the token the copy proposes), how often its lookup runs held and broke there. A position
whose pair broke more often than the answer's runs do on average is judged by the excess (EditedRun), and the rest as
if those repeated breaks were not among them: without this, a copy was drafted long right up to an edit the answer
had already made twice. A run copied from the answer's own text is also judged by the place alone (the token before):
code that repeats its own lines varies them at the same spot with a new value each time (a test's argument, a
vector's next component), so the pair the copy proposes there is new at every line while the place is not.
Measurements: the commits that made this module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.tuning import FLAGGED, MEAN_PRIOR, MEAN_WEIGHT, PAIR_WEIGHT


@dataclass(frozen=True)
class EditedRun:
    """A lookup run's positions as this answer's edit points judge them."""

    hazards: list[float]  # each position's chance of a break beyond the answer's mean (0: none known)
    repeated_share: float  # of the answer's breaks, the share that fell on a pair that had broken before

    def apply(self, rates: Sequence[float]) -> list[float]:
        """`rates` with each edit point's excess hazard added, and the other positions spared the share of breaks that
        the edit points take."""
        return [rate * (1 - hazard) if hazard > FLAGGED else rate + (1 - rate) * self.repeated_share
                for rate, hazard in zip(rates, self.hazards)]


@dataclass
class EditPoints:
    """One answer's lookup runs, per (previous token, proposed token) pair: how often they held there and broke there."""

    held: Counter[tuple[int, int]] = field(default_factory=Counter)
    broke: Counter[tuple[int, int]] = field(default_factory=Counter)
    place_held: Counter[int] = field(default_factory=Counter)  # the same per place alone (the token before)
    place_broke: Counter[int] = field(default_factory=Counter)
    breaks: int = 0
    holds: int = 0
    repeated: int = 0  # breaks at a pair that had broken before
    last: int = -1  # the last settled token (-1: none yet)
    _watched: list[int] = field(default_factory=list)  # the run the next settled tokens judge

    def mean_break(self) -> float:
        return (self.breaks + MEAN_WEIGHT * MEAN_PRIOR) / (self.breaks + self.holds + MEAN_WEIGHT)

    def judge(self, run: Sequence[int], own: bool = False) -> EditedRun:
        """`run`'s positions by where this answer's runs broke; `own`: a run copied from the answer's own text, judged by
        its places too (module docstring)."""
        mean, hazards, previous = self.mean_break(), [], self.last
        for token in run:
            pair = (previous, token)
            if pair not in self.broke and not (own and previous in self.place_broke):  # never broke here: no excess hazard
                hazards.append(0.0)
                previous = token
                continue
            broke, held = self.broke[pair], self.held[pair]
            chance = (broke + PAIR_WEIGHT * mean) / (broke + held + PAIR_WEIGHT)
            if own:
                broke, held = self.place_broke[previous], self.place_held[previous]
                chance = max(chance, (broke + PAIR_WEIGHT * mean) / (broke + held + PAIR_WEIGHT))
            hazards.append(max(0.0, (chance - mean) / (1 - mean)))
            previous = token
        return EditedRun(hazards, self.repeated / (self.breaks + 1))

    def watch(self, run: Sequence[int]) -> None:
        """This step's lookup run (a copy that agrees with the text, not a guess past an edit), drafted or not."""
        self._watched = list(run)

    def settle(self, tokens: Sequence[int]) -> None:
        """The step's settled tokens judge the watched run: each position once, up to its first break."""
        previous = self.last
        for proposed, token in zip(self._watched, tokens):
            pair = (previous, proposed)
            if token != proposed:
                self.repeated += self.broke[pair] > 0
                self.broke[pair] += 1
                self.place_broke[previous] += 1
                self.breaks += 1
                break
            self.held[pair] += 1
            self.place_held[previous] += 1
            self.holds += 1
            previous = token
        self._watched = []
        if tokens:
            self.last = tokens[-1]
