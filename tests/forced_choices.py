"""auto (and the batch planner) with the choice pinned to the hybrid option, so tests can run that path on every step it
can take.

The choice itself is tested on its own (tests/test_auto_planner.py, tests/test_batch_planner.py); what this exercises is everything after it:
the lookup tokens, the draft model continuing from their end, verification and the rollback, on real models.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.auto.choice import Choice, Source
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookups
from localspec.engine.pass_costs import CostTable


class AlwaysHybridPlanner(Planner):
    """The planner with every slot that has a lookup run pinned to hybrid: half the run, so the draft model continues
    mid-copy, where its tokens and the run's rest may disagree, then the draft model up to the slot's cap (the drafting,
    verification and rollback after the choice are the real ones)."""

    def plan(self, slots: Sequence[SlotOptions]) -> list[Choice]:
        choices = super().plan(slots)
        for i, options in enumerate(slots):
            usable = min(len(options.lookup.tokens), options.cap - 1)
            if usable >= 1 and self.has_draft_model:
                choices[i] = Choice(Source.HYBRID, options.cap, 1.0, lookup_k=max(1, usable // 2))
        return choices


class AlwaysHybrid(AutoDrafter):
    """auto with its planner pinned so (for one slot or many)."""

    def __init__(self, costs: CostTable, model: ModelDrafter | None = None, lookups: Lookups | None = None) -> None:
        super().__init__(costs, model, lookups)
        self.planner = AlwaysHybridPlanner(costs, model is not None)
