"""The shared frame of the drafters that pair prompt lookup with the draft model (hybrid, hierarchical).

Both must keep each sequence's lookup index and draft cells in step with its
accepted text; they differ only in how a proposal is made, which each defines in `propose`.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.base import Drafter, Observation
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookups


class LookupModelDrafter(Drafter):
    def __init__(self, model: ModelDrafter, lookups: Lookups | None = None) -> None:
        self.model = model
        self.models = model.models
        self.lookups = lookups or Lookups(remember=False)

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        self.lookups[seq].start(prompt)
        self.model.begin(seq, prompt)

    def observe(self, seen: Observation) -> None:
        self.model.observe(seen)

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        self.lookups[seq].advance(tokens)
        self.model.accept(seq, tokens)
