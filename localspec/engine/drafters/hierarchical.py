"""Hierarchical drafting: prompt lookup proposes, the draft model vets, the target verifies what survived.

A lookup run that goes wrong wastes target rows, which are the expensive ones
on a CPU. The draft model checks the whole run in one batched pass (cheap: it
is small, and a batch costs it little more than a token) and only the prefix it
agrees with goes on to the target. When the draft is right about the target,
the target is spared the rows that would have been rejected anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.lookup_model import LookupModelDrafter
from localspec.engine.drafters.ngram import Lookups
from localspec.engine.drafters.registry import Part


class HierarchicalDrafter(LookupModelDrafter):
    name = "hierarchical"

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        runs = [self.lookups[ask.seq].agreeing_run(ask.k) for ask in asks]
        agreed = self.model.agreed_prefixes([(ask.seq, run) for ask, run in zip(asks, runs)])
        # The vetting is greedy and deterministic, so each proposed token's q is one-hot (lossless at any temperature).
        return [Draft.deterministic(run[:n], ask.sampling) for ask, run, n in zip(asks, runs, agreed)]


def build(sources: DraftSources) -> Drafter:
    return HierarchicalDrafter(ModelDrafter(sources.part(Part.TARGET_TOKENIZER)), Lookups(remember=False, ends_answer=sources.target.vocab.is_eog))
