"""When to try the draft model while it is losing: a budget, a fixed share of the decoding time.

Lookup is judged for free every step; the draft model only by asking it, which costs its pass and its catch-up. Tries at
fixed intervals cost the same number per answer whatever each cost, and made auto slower than plain decoding where a try
is dear (a 2-core CPU). Paid from a budget, tries cost at most EXPLORE_SHARE of the time: rarely where dear, often where
cheap (a GPU). Every try is paid for, the first too, at what it loses if none of its tokens is accepted: a free first
try read the whole prompt and answer into the draft (half a second on a 2-core Xeon) and made auto 0.93x plain on
code writing where it chose plain on 110 of 120 steps (issue 55). An ask the priors favour but the draft's own
evidence does not is a try too (planner.plan).

The budget is carried from answer to answer, so that a try dearer than one answer's share can still be paid for, but
one try may spend no more than an answer earns (the mean over the answers so far): else the answer that takes it pays
for those before it. On the 2-core Xeon a try in an 85-token chat answer read its prompt and text into the draft for
313 ms, earned over earlier answers, and cost that answer 5% of its time; an answer of 128 tokens there earns 175 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.tuning import EXPLORE_SHARE


@dataclass
class ExplorationBudget:
    share: float = EXPLORE_SHARE
    saved_ms: float = 0.0
    earned_ms: float = 0.0  # what the answer under way has earned so far
    answers: int = 0  # the answers that earned something, before this one
    per_answer_ms: float = 0.0  # what they earned, on average

    def accrue(self, step_ms: float) -> None:
        """A step that did not ask the draft model, expected to take `step_ms`."""
        self.saved_ms += self.share * step_ms
        self.earned_ms += self.share * step_ms

    def new_answer(self) -> None:
        """An answer begins: the last one's earnings join the mean (one that earned nothing, such as a prompt read to warm
        a cache, is no answer)."""
        if self.earned_ms:
            self.per_answer_ms += (self.earned_ms - self.per_answer_ms) / (self.answers + 1)
            self.answers += 1
        self.earned_ms = 0.0

    @property
    def spendable_ms(self) -> float:
        """What one try may spend: the saved budget, but no more than an answer earns (this one, if it has earned more)."""
        if not self.answers:
            return self.saved_ms
        return min(self.saved_ms, max(self.per_answer_ms, self.earned_ms))

    def afford(self, worst_loss_ms: float) -> bool:
        """Whether a try that could lose this much (against the best choice, none of its tokens accepted) is paid for;
        a try taken spends the whole budget, so a long stretch without hope buys one try, not a burst."""
        if worst_loss_ms > self.spendable_ms:
            return False
        self.saved_ms = 0.0
        return True
