"""When to try the draft model while it is losing: a budget, a fixed share of the decoding time.

Lookup is judged every step for free (the text that follows shows what it would
have got); the draft model can only be judged by asking it, which costs its
pass and, after a plain stretch, its catch-up on every token it missed. Tries
at doubling intervals, restarted with every request, cost a fixed number of
tries per answer whatever each one cost: on a 2-core CPU with a Q8_0 target, a
try after 16 plain steps read ~50 tokens into the draft and cost about three
plain steps, and two or three per prose answer made auto 5-13% slower than
plain decoding there. Paid from a budget instead, tries cost at most
EXPLORE_SHARE of the time, as often as that affords: rarely where a try is dear,
often where it is cheap (a GPU). The first try is not budgeted: until the draft
has been judged once, a prior is all auto knows of it, and a prior can be far off
(on code a Q4_K_M 0.5B draft of a Q8_0 1.5B target is accepted 95-100%, 1.5x
plain, where a prior of 0.7 says it cannot pay on a 2-core CPU). Fewer tries are
needed since the acceptance is learned per class of the target's confidence
(confidence.py): prose's class says what code's does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EXPLORE_SHARE = 0.02  # of the time spent decoding: what trying a losing draft model may cost at most


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
