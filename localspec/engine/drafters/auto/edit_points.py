"""Where one answer departs from what it copies: a pair of tokens it broke a copy at is likely to break the next one.

An edit of code repeats its kind: type hints go after each parameter, a rename
changes each use of a name. So the places where an answer's copies break recur,
and a token pair (the token before, the token the copy proposes) at which this
answer's lookup run broke is likelier to break again. The learned rates (and the
answer's CopyEffect) spread those breaks evenly over a copy's positions. Once an
answer has broken a copy at `def load(path` + `)` (it wrote `: str`), a 19-token
match at `def save(path` + `,` was drafted 15 tokens long, broke at once, and
cost a 16-token verify for 2 tokens; the same happened at `def merge(a`.

So each answer counts, per pair, how often its lookup runs held there and broke
there. A position whose pair broke more often than the answer's runs break on
average is judged by the excess (EditedRun). Its other positions are judged as
if the share of the answer's breaks that fell on such pairs (its repeated edit
points) were not among them: the learned rates' misses include the edits, and
where no edit point is, those are not expected. Without that share, a sorted
list whose line starts break half the time drafted its long copies three tokens
at a time.

Replayed over 10 shuffled orders of the bench's plain answers (`python -m
tests.tools.lookup_replay`'s way), the mean over every prompt went up on all
twelve files of stops 37-42, both targets: on the four these settings were chosen
on (stops 41b and 42) Q4_K_M 1.2905x -> 1.3025x and 1.2876x -> 1.2970x plain,
Q8_0 1.3096x -> 1.3160x and 1.3124x -> 1.3155x; on the eight others by 0.03-1.0%.
The type-hint edit went up 3.5-9.5% on every file, rename and docstrings mostly
1-2%; the sort-list repeat lost up to 5% on Q4_K_M (its line starts break about
half the time, and a run across one is drafted shorter), docstrings up to 2% on
two files, no other prompt more than 1%. On the two files of stop 43, which
chose nothing, 20 orders put the type-hint edit at 0.80-0.87 of the lookup
ceiling on Q4_K_M (0.75-0.80 without) and 0.78-0.87 on Q8_0 (0.77-0.84). A
three-round bench is too few paths to show that: one order's bets decide a
prompt by several percent, and a bench with this change measured 0.83-0.84 where
one without had measured 0.84.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

PAIR_WEIGHT = 1.0  # a pair's positions' worth of belief in the answer's mean, before its own evidence
MEAN_PRIOR = 0.1  # how often a judged lookup position breaks, before the answer shows its own
MEAN_WEIGHT = 4.0  # positions' worth of belief in MEAN_PRIOR
FLAGGED = 0.05  # an excess hazard past this marks an edit point


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
    breaks: int = 0
    holds: int = 0
    repeated: int = 0  # breaks at a pair that had broken before
    last: int = -1  # the last settled token (-1: none yet)
    _watched: list[int] = field(default_factory=list)  # the run the next settled tokens judge

    def mean_break(self) -> float:
        return (self.breaks + MEAN_WEIGHT * MEAN_PRIOR) / (self.breaks + self.holds + MEAN_WEIGHT)

    def judge(self, run: Sequence[int]) -> EditedRun:
        mean, hazards, previous = self.mean_break(), [], self.last
        for token in run:
            pair = (previous, token)
            broke, held = self.broke[pair], self.held[pair]
            chance = (broke + PAIR_WEIGHT * mean) / (broke + held + PAIR_WEIGHT)
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
                self.breaks += 1
                break
            self.held[pair] += 1
            self.holds += 1
            previous = token
        self._watched = []
        if tokens:
            self.last = tokens[-1]
