"""A model that drafts auto's model tokens (the draft model, or a head of the target): what its passes cost, how often
its tokens are accepted, and how a draft's passes are laid out (chained heads re-read the draft, pass by pass)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.auto.choice import Source
from localspec.engine.drafters.auto.confidence import ConfidenceClasses
from localspec.engine.pass_costs import PassCosts
from localspec.engine.tuning import MODEL_K_MAX


@dataclass
class ModelSource:
    """A model that drafts auto's model tokens: the draft model, or a head of the target (MTP, EAGLE-3). What its passes
    cost, how often the target accepts its tokens (by the target's confidence), and its last pass's size."""

    source: Source
    costs: PassCosts
    acceptance: ConfidenceClasses = field(default_factory=ConfidenceClasses)
    last_pass: int | None = None
    chained_heads: int | None = None  # chained heads (Drafter.chained_heads): how many

    @property
    def k_max(self) -> int:
        """The most tokens it is asked for: chained heads draft one each."""
        return min(MODEL_K_MAX, self.chained_heads or MODEL_K_MAX)

    @property
    def continues_lookup(self) -> bool:
        """Only the draft model continues a lookup run (a hybrid) or a grammar's forced text: a head would need the
        target's rows for those tokens."""
        return self.source is Source.MODEL

    def switches(self, sizes: Sequence[int], last: int | None = None) -> float:
        """The changes of size a chain of its passes of `sizes` pays, after its last pass (or one of `last` tokens)."""
        before = self.last_pass if last is None else last
        return sum(self.costs.switch(prior, n) for prior, n in zip([before, *sizes], sizes))

    def chained_ms(self, queued: int, reach: Sequence[int], share: float) -> float:
        """Chained heads' passes for a step: every head reads the `queued` tokens its sequences have not (that cost spread
        by `share`, as a catch-up is), then head d reads the d + 1 tokens of each of the `reach[d]` sequences drafting
        position d (HeadDrafter.draft)."""
        catch_up = [queued] * (self.chained_heads or 1) if queued else []
        chain = [n * (depth + 1) for depth, n in enumerate(reach)]
        return share * sum(map(self.costs.cost, catch_up)) + sum(map(self.costs.cost, chain)) + self.switches([*catch_up, *chain])
