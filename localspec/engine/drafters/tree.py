"""Tree drafting: where the draft is unsure, it proposes its two best candidates, and the target checks both at once.

This is the scheme of llama.cpp's examples/speculative with its split
probability (--p-split): at the first position where the draft's second choice
is at least `p_split` likely, the draft forks. The main chain goes on with its
first choice and the fork with its second, each up to K; the target verifies
both branches in one decode, as two sequences that share the prefix in its KV
cache, and keeps the branch that holds its own choices (see verify_tree).
One fork per step keeps the batch at most 2K+1 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources, Fork, Observation
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.registry import Part
from localspec.engine.sampling import top_two

P_SPLIT = 0.1  # llama.cpp's default --p-split


class TreeDrafter(Drafter):
    name = "tree"

    def __init__(self, model: ModelDrafter, p_split: float = P_SPLIT) -> None:
        self.model = model
        self.models = model.models
        self.p_split = p_split

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        self.model.begin(seq, prompt)

    def observe(self, seen: Observation) -> None:
        self.model.observe(seen)

    def _chain(self, seq: int, start: np.ndarray | int, k: int, p_min: float) -> tuple[list[int], tuple[int, int] | None]:
        """Up to k greedy tokens from the logits `start` (or from a given first token), and the first place worth forking."""
        tokens: list[int] = []
        fork: tuple[int, int] | None = None
        if isinstance(start, int):
            tokens.append(start)
            if k == 1:
                return tokens, None
            row = self.model.step(seq, start)
        else:
            row = start
        while len(tokens) < k:
            (best, p_best), (second, p_second) = top_two(row)
            if p_best < p_min:
                break
            if fork is None and p_second >= self.p_split:
                fork = (len(tokens), second)
            tokens.append(best)
            if len(tokens) == k:
                break
            row = self.model.step(seq, best)
        return tokens, fork

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return [self._propose(ask) for ask in asks]

    def _propose(self, ask: Ask) -> Draft:
        if ask.k <= 0:
            return Draft()
        main, split = self._chain(ask.seq, self.model.feed(ask.seq, [])[-1], ask.k, ask.p_min)
        fork = None
        if split is not None:
            at, token = split
            self.model.rewind(ask.seq, keep=at)  # back to the split point; the fork is drafted from there
            branch, _ = self._chain(ask.seq, token, ask.k - at, ask.p_min)
            fork = Fork(at, branch)
        # Both branches are deterministic candidates: at temperature > 0 the target samples its own token and
        # the branch holding it goes on, so every token still comes from p (q is one-hot).
        return Draft.deterministic(main, ask.sampling, fork)

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        self.model.accept(seq, tokens)


def build(sources: DraftSources) -> Drafter:
    return TreeDrafter(ModelDrafter(sources.part(Part.TARGET_TOKENIZER)))
