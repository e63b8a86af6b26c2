"""auto (and the batch planner) with the choice pinned to the hybrid option, so tests can run that path on every step it
can take.

The choice itself is tested on its own (tests/test_drafters.py); what this exercises is everything after it:
the lookup tokens, the draft model continuing from their end, verification and the rollback, on real models.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.auto.choice import HYBRID, Choice
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.ngram import Lookup


class AlwaysHybrid(AutoDrafter):
    def decide(self, k_cap: int, lookup: Lookup) -> Choice:
        usable = min(len(lookup.tokens), k_cap - 1)
        if usable < 1 or self.model is None:
            return super().decide(k_cap, lookup)
        # Half the run, so the draft model continues mid-copy, where its tokens and the run's rest may disagree.
        return Choice(HYBRID, k_cap, 1.0, lookup_k=max(1, usable // 2))


class AlwaysHybridPlanner(Planner):
    """The batch planner with every auto slot that has a lookup run pinned to hybrid: half the run, then the draft
    model up to the slot's cap (the drafting, verification and rollback after the choice are the real ones)."""

    def plan(self, slots: Sequence[SlotOptions]) -> list[Choice]:
        choices = super().plan(slots)
        for i, options in enumerate(slots):
            usable = min(len(options.lookup.tokens), options.cap - 1)
            if options.role == "adaptive" and usable >= 1:
                choices[i] = Choice(HYBRID, options.cap, 1.0, lookup_k=max(1, usable // 2))
        return choices
