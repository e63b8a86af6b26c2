"""The shared frame of the drafters that pair prompt lookup with the draft model (hybrid, hierarchical).

Both must keep the lookup index and the draft's cache in step with the accepted
text; they differ only in how a proposal is made, which each defines in `propose`.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.drafters.base import Drafter
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import NgramDrafter


class LookupModelDrafter(Drafter):
    def __init__(self, model: ModelDrafter, ngram: NgramDrafter | None = None) -> None:
        self.model = model
        self.models = model.models
        self.ngram = ngram or NgramDrafter()

    def start(self, prompt: Sequence[int]) -> None:
        self.ngram.start(prompt)
        self.model.start(prompt)

    def advance(self, tokens: Sequence[int]) -> None:
        self.ngram.advance(tokens)
        self.model.advance(tokens)
