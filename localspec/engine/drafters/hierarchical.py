"""Hierarchical drafting: prompt lookup proposes, the draft model vets, the target verifies what survived.

A lookup run that goes wrong wastes target rows, which are the expensive ones
on a CPU. The draft model checks the whole run in one batched pass (cheap: it
is small, and a batch costs it little more than a token) and only the prefix it
agrees with goes on to the target. When the draft is right about the target,
the target is spared the rows that would have been rejected anyway.
"""

from __future__ import annotations

import numpy as np

from localspec.engine.drafters.base import Draft, Drafter, DraftSources
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.lookup_model import LookupModelDrafter
from localspec.engine.sampling import SamplingParams


class HierarchicalDrafter(LookupModelDrafter):
    name = "hierarchical"

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        lookup = self.ngram.agreeing_run(k)
        agreed = lookup[: self.model.agreed_prefix(lookup)]
        # The vetting is greedy and deterministic, so each proposed token's q is one-hot (lossless at any temperature).
        return Draft.deterministic(agreed, sampling)


def build(sources: DraftSources) -> Drafter:
    return HierarchicalDrafter(ModelDrafter(sources.draft_model()))
