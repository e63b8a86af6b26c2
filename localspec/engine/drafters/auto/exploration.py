"""When to try the draft model while it is losing: a budget, a fixed share of the decoding time.

Lookup is judged for free every step; the draft model only by asking it, which costs its pass and its catch-up. Tries at
fixed intervals cost the same number per answer whatever each cost, and made auto slower than plain decoding where a try
is dear (a 2-core CPU). Paid from a budget, tries cost at most EXPLORE_SHARE of the time: rarely where dear, often where
cheap (a GPU). The first try is free of the budget, because until the draft is judged once only a prior speaks for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from localspec.engine.tuning import EXPLORE_SHARE


@dataclass
class ExplorationBudget:
    share: float = EXPLORE_SHARE
    saved_ms: float = math.inf  # the first try is free (the module's docstring says why)

    def accrue(self, step_ms: float) -> None:
        """A step that did not ask the draft model, expected to take `step_ms`."""
        self.saved_ms += self.share * step_ms

    def afford(self, expected_loss_ms: float) -> bool:
        """Whether a try expected to lose this much (against the best choice, for the tokens it should yield) is paid
        for; a try taken spends the whole budget, so a long stretch without hope buys one try, not a burst."""
        if expected_loss_ms > self.saved_ms:
            return False
        self.saved_ms = 0.0
        return True
