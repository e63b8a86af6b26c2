"""Hybrid drafting: prompt lookup first, the draft model where lookup runs short.

Lookup costs nothing but only knows text that occurred before; the draft model
knows the language but costs a decode per token. Here lookup proposes what it
can, and when its run is shorter than K the draft model continues from the end
of it, so a step gets the long free run where there is one and a model's guess
everywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources, one_hot
from localspec.engine.drafters.draft_model import DraftOrder, ModelDrafter
from localspec.engine.drafters.lookup_model import LookupModelDrafter
from localspec.engine.drafters.ngram import Lookups
from localspec.engine.drafters.registry import Part


class HybridDrafter(LookupModelDrafter):
    name = "hybrid"

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        runs = [self.lookups[ask.seq].agreeing_run(ask.k, ask.after) for ask in asks]
        # The draft model continues every short run in one batched drafting, each from its run's end.
        continuations = iter(self.model.draft([DraftOrder.of(ask, [*ask.after, *run], k=ask.k - len(run)) for ask, run in zip(asks, runs)
                                               if len(run) < ask.k]))
        drafts = []
        for ask, run in zip(asks, runs):
            if len(run) >= ask.k:
                drafts.append(Draft.deterministic(run, ask.sampling))
                continue
            continuation = next(continuations)
            dists = one_hot(run) + continuation.dists if ask.sampling is not None else []
            drafts.append(Draft(run + continuation.tokens, dists))
        return drafts


def build(sources: DraftSources) -> Drafter:
    return HybridDrafter(ModelDrafter(sources.part(Part.TARGET_TOKENIZER)), Lookups(remember=False, ends_answer=sources.target.vocab.is_eog))
