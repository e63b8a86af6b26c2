"""What the draft model's catch-up costs a step: reading the accepted text it missed, spread over the asks it buys.

A draft that sat out a plain or lookup stretch reads what it missed in one batch before it drafts, and then drafts
cheaply for as long as it keeps being asked. Charged whole to one step, a draft was never resumed; spread over a fixed
number of steps, it was resumed after every copied stretch where lookup takes the step back within a few asks. So the
cost is spread over the asks a resume has been seen to buy (learned with decay), and, within an answer, over what
lookup's share of recent steps leaves it (a new answer starts at NEW_ANSWER_LOOKUP_SHARE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from localspec.engine.pass_costs import PassCosts
from localspec.engine.tuning import LOOKUP_SHARE_DECAY, NEW_ANSWER_LOOKUP_SHARE, RESUME_MIN, RUN_DECAY, RUN_PRIOR, RUN_PRIOR_WEIGHT


@dataclass
class ResumeRuns:
    """How many asks a resume of the draft model buys (until the next resume), learned with decay from the runs seen."""

    total: float = RUN_PRIOR * RUN_PRIOR_WEIGHT
    weight: float = RUN_PRIOR_WEIGHT
    current: int | None = None  # asks since the last resume (None: none yet in this answer)
    lookup_share: float = NEW_ANSWER_LOOKUP_SHARE  # of this answer's last steps, decayed: how many lookup copied in

    @property
    def learned(self) -> float:
        """The asks resumes have bought."""
        return max(1.0, self.total / self.weight)

    @property
    def expected(self) -> float:
        """The asks a resume now is expected to buy: as many as resumes have bought, and no more than lookup leaves."""
        return min(self.learned, 1 / self.lookup_share) if self.lookup_share > 0 else self.learned

    def step(self, copied: bool, sourced: bool = False) -> None:
        """A step was taken; `copied`: lookup drafted it and a copy's worth was accepted (a step or two of a short match
        in new code is not a copy: counted, it kept the draft from ever resuming on fib). `sourced`: lookup found a run
        here, so the text has a source even where the run broke at an edit. Until the draft's first resume in the answer
        (the one that reads the prompt) that is neither a copy nor new text, and leaves the share as it was: a rewrite's
        first lines break its runs at every renamed name, and read as new code they let the draft resume on the whole
        prompt before the copy showed. Later in an answer it counts as new text, as before: kept there too, it held the
        draft back from the conversions and fixes it was winning (yaml-json 1.33x -> 1.19x plain on a Q8_0 target)."""
        if sourced and not copied and self.current is None:
            return
        self.lookup_share = LOOKUP_SHARE_DECAY * self.lookup_share + (1 - LOOKUP_SHARE_DECAY) * copied

    def asked(self, missed: int) -> None:
        """The draft model was asked, after it `missed` accepted tokens."""
        if missed >= RESUME_MIN:
            self.end()
            self.current = 1
        elif self.current is not None:
            self.current += 1

    def new_answer(self) -> None:
        """The run in progress ends with its answer; lookup's share is the new answer's own."""
        self.end()
        self.lookup_share = NEW_ANSWER_LOOKUP_SHARE

    def end(self) -> None:
        """The run in progress is over (a resume, or the answer's end): it teaches the spread."""
        if self.current is not None:
            self.total = RUN_DECAY * self.total + self.current
            self.weight = RUN_DECAY * self.weight + 1
            self.current = None


def catch_up_price(draft: PassCosts, missed: int, spread: float, then: int = 0) -> float:
    """The draft's first pass of an ask, reading the `missed` accepted tokens it has not seen, then `then` more (a hybrid's
    lookup tokens), as decide() weighs it: one token's pass, plus the rest of the batch spread over `spread` asks."""
    first = draft.cost(1 + then)
    return first + (draft.cost(max(1, missed) + then) - first) / spread


def batch_share(missed: Sequence[int], spreads: Sequence[float]) -> float:
    """Several slots' catch-ups read in one batch: the share of that batch a step is charged, each slot's `missed` tokens
    spread over its own `spreads` asks (1 where none missed)."""
    total = sum(missed)
    return sum(n / spread for n, spread in zip(missed, spreads)) / total if total else 1.0
