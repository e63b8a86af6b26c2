"""What an answer may lose on lookup runs from thin evidence: a 2-token match, or a guess past an edit, in prose.

Such a run is a fair bet by the rates, and over a long answer bets even out; in a short one a single lost bet is the
whole difference (a haiku lost several percent of its time to one). So these bets are paid from what the answer's
lookup bets have won so far; a run that could lose more is drafted shorter, or not at all. They once had a share of
each step's time too (3%); all auto may lose where nothing pays is now the tries' share (EXPLORE_SHARE, issue 55).
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.pass_costs import CostTable


@dataclass
class ThinBets:
    budget_ms: float = 0.0

    def cap(self, costs: CostTable, k: int) -> int:
        """The longest run, up to k tokens, whose loss the budget covers."""
        while k > 0 and costs.verify(k + 1) - costs.verify(1) > self.budget_ms:
            k -= 1
        return k

    def step(self, costs: CostTable, lookup_k: int, accepted: int) -> None:
        """A step ended: it drafted `lookup_k` lookup tokens (0: none) and had `accepted` of its draft accepted."""
        if lookup_k:
            self.budget_ms += (accepted + 1) * costs.verify(1) - costs.verify(lookup_k + 1)
