"""Hierarchical drafting: prompt lookup proposes, the draft model vets, the target verifies what survived.

A lookup run that goes wrong wastes target rows, which are the expensive ones
on a CPU. The draft model checks the whole run in one batched pass (cheap: it
is small, and a batch costs it little more than a token) and only the prefix it
agrees with goes on to the target. When the draft is right about the target,
the target is spared the rows that would have been rejected anyway.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.engine.drafter import Draft, ModelDrafter, one_hot
from localspec.engine.ngram import NgramDrafter
from localspec.engine.sampling import SamplingParams
from localspec.engine.stats import GenerationStats


class HierarchicalDrafter:
    name = "hierarchical"

    def __init__(self, model: ModelDrafter, ngram: NgramDrafter | None = None) -> None:
        self.model = model
        self.ngram = ngram or NgramDrafter()
        self.decode_ns = 0

    def start(self, prompt: Sequence[int]) -> None:
        self.ngram.start(prompt)
        self.model.start(prompt)
        self.model.decode_ns = 0

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        lookup = self.ngram.match(k)
        agreed = lookup[: self.model.agreed_prefix(lookup)]
        self.decode_ns = self.model.decode_ns
        # The vetting is greedy and deterministic, so each proposed token's q is one-hot (lossless at any temperature).
        return Draft(agreed, one_hot(agreed) if sampling is not None else [])

    def advance(self, tokens: Sequence[int]) -> None:
        self.ngram.advance(tokens)
        self.model.advance(tokens)

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass
