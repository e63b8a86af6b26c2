"""Hybrid drafting: prompt lookup first, the draft model where lookup runs short.

Lookup costs nothing but only knows text that occurred before; the draft model
knows the language but costs a decode per token. Here lookup proposes what it
can, and when its run is shorter than K the draft model continues from the end
of it, so a step gets the long free run where there is one and a model's guess
everywhere else.
"""

from __future__ import annotations

import numpy as np

from localspec.engine.drafters.base import Draft, Drafter, DraftSources, one_hot
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.lookup_model import LookupModelDrafter
from localspec.engine.sampling import SamplingParams


class HybridDrafter(LookupModelDrafter):
    name = "hybrid"

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        lookup = self.ngram.agreeing_run(k)
        if len(lookup) >= k:
            return Draft.deterministic(lookup, sampling)
        continuation = self.model.continue_after(lookup, k - len(lookup), p_min, sampling, rng)
        dists = one_hot(lookup) + continuation.dists if sampling is not None else []
        return Draft(lookup + continuation.tokens, dists)


def build(sources: DraftSources) -> Drafter:
    return HybridDrafter(ModelDrafter(sources.draft_model()))
