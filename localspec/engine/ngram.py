"""Prompt lookup: draft by continuing the last n tokens from where they occurred before.

Code edits, quotes and summaries repeat their prompt; so do answers that reuse
names they already wrote. When the last n tokens (n from n_max down to n_min)
appeared earlier in the prompt or the answer, the tokens that followed them are
proposed. It costs no model time: an index of n-grams is kept as tokens arrive.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.engine.drafter import Draft, one_hot
from localspec.engine.sampling import SamplingParams
from localspec.engine.stats import GenerationStats

NGRAM_MIN = 2
NGRAM_MAX = 4


class NgramDrafter:
    name = "ngram"

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("n-gram sizes need 1 <= n_min <= n_max")
        self.n_min, self.n_max = n_min, n_max
        self.decode_ns = 0
        self._tokens: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}  # n-gram -> the latest index where it ends
        self._previous_end: dict[tuple[int, ...], int] = {}  # ...and the one before, for the current suffix

    def start(self, prompt: Sequence[int]) -> None:
        self._tokens = []
        self._last_end.clear()
        self._previous_end.clear()
        self._extend(prompt)

    def _extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self._tokens.append(token)
            end = len(self._tokens) - 1
            for n in range(self.n_min, self.n_max + 1):
                if end + 1 >= n:
                    key = tuple(self._tokens[end + 1 - n : end + 1])
                    if key in self._last_end:
                        self._previous_end[key] = self._last_end[key]
                    self._last_end[key] = end

    def match(self, k: int) -> list[int]:
        """The continuation of the longest suffix seen before (its most recent occurrence), up to k tokens."""
        if k <= 0:
            return []
        end = len(self._tokens) - 1
        for n in range(self.n_max, self.n_min - 1, -1):
            if end + 1 < n:
                continue
            key = tuple(self._tokens[end + 1 - n : end + 1])
            earlier = self._previous_end.get(key) if self._last_end.get(key) == end else self._last_end.get(key)
            if earlier is not None and earlier < end:
                return self._tokens[earlier + 1 : min(earlier + 1 + k, end + 1)]
        return []

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        tokens = self.match(k) if k > 0 else []
        return Draft(tokens, one_hot(tokens) if sampling is not None else [])

    def advance(self, tokens: Sequence[int]) -> None:
        self._extend(tokens)

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass
