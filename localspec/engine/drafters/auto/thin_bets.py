"""What an answer may lose on lookup runs from thin evidence: a 2-token match, or a guess past an edit, in prose.

Where the target has lately been unsure, a 2-token match's next token held about
half the time on the bench's answers (47-55% of those from the prompt), so a run
from one is a fair bet by the rates, and auto takes it. Over a long answer such
bets even out; in a short one a single lost bet is the whole difference: a haiku
of 17 tokens on the Q4_K_M target lost 4-7% of its time to one (`the sea`, and the
prompt's ` at night.` offered), where a 4-token pass costs 1.67x one token. So such
bets are paid from a budget of the answer's own: what its lookup bets have won so
far, plus BET_SHARE of each step's time. A run whose loss, were all of it rejected,
exceeds the budget is drafted shorter, or not at all. A prose answer then loses at
most about BET_SHARE of its time to them, and one whose lookup pays (a chat that
quotes the commands it was given) bets as before once it has won. Replayed over
20 shuffled orders of eight bench files (both targets), the haiku went from
0.965-0.972x plain to 0.99-1.00x, and the mean moved by -0.27% to +0.05%: the cost
is a repetition chat's (repeat-sort-list, at 2.1-2.3x plain, 2-4% lower), whose
first prose bets won before its copies paid for them. Drafting a run only whole or
not at all, or a share of 5%, came out within 0.1% of this.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.drafters.auto.costs import CostTable

THIN_MATCH = 3  # a lookup match shorter than this, where the target is unsure, is thin evidence
BET_SHARE = 0.03  # of each step's plain time: what an answer may lose on thin bets beyond what its lookup bets won


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
        plain_ms = costs.verify(1)
        self.budget_ms += BET_SHARE * plain_ms
        if lookup_k:
            self.budget_ms += (accepted + 1) * plain_ms - costs.verify(lookup_k + 1)
