"""auto with its choice pinned to the hybrid option, so tests can run that path on every step it can take.

The choice itself is tested on its own (tests/test_drafters.py); what this exercises is everything after it:
the lookup tokens, the draft model continuing from their end, verification and the rollback, on real models.
"""

from __future__ import annotations

from localspec.engine.drafters.auto.controller import HYBRID, AutoDrafter, Decision
from localspec.engine.drafters.ngram import Lookup


class AlwaysHybrid(AutoDrafter):
    def decide(self, k_cap: int, lookup: Lookup) -> Decision:
        usable = min(len(lookup.tokens), k_cap - 1)
        if usable < 1 or self.model is None:
            return super().decide(k_cap, lookup)
        # Half the run, so the draft model continues mid-copy, where its tokens and the run's rest may disagree.
        return Decision(HYBRID, k_cap, 1.0, lookup_k=max(1, usable // 2))
