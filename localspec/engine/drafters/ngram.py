"""Prompt lookup: draft by continuing the last n tokens from where they occurred before.

Code edits, quotes and summaries repeat their prompt; so do answers that reuse
names they already wrote. When the last n tokens (n from n_max down to n_min)
appeared earlier in the prompt or the answer, the tokens that followed them are
proposed. It costs no model time: an index of n-grams is kept as tokens arrive.

Of the earlier occurrences, the one whose preceding text agrees longest with
the text before the cursor is copied, and that agreement (`match_length`) is
reported with the run: a run copied from a place that matches the last 20
tokens is far likelier to be right than one found by a 2-token coincidence,
and the controller drafts long or not at all accordingly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.base import Draft, Drafter, DraftSources
from localspec.engine.sampling import SamplingParams

NGRAM_MIN = 2
NGRAM_MAX = 4
MATCH_CAP = 32  # agreement is measured up to this many tokens back...
CANDIDATES = 8  # ...for this many of the most recent occurrences


@dataclass(frozen=True)
class Lookup:
    tokens: list[int] = field(default_factory=list)
    match_length: int = 0  # tokens before the cursor that agree with the text before the copied run


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("n-gram sizes need 1 <= n_min <= n_max")
        self.n_min, self.n_max = n_min, n_max
        self._tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> every index where it ends, oldest first

    def start(self, prompt: Sequence[int]) -> None:
        self._tokens = []
        self._ends.clear()
        self._extend(prompt)

    def _extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self._tokens.append(token)
            end = len(self._tokens) - 1
            for n in range(self.n_min, min(self.n_max, end + 1) + 1):
                self._ends.setdefault(tuple(self._tokens[end + 1 - n : end + 1]), []).append(end)

    def _agreement(self, earlier: int, end: int) -> int:
        """How many tokens ending at `earlier` equal those ending at `end` (up to MATCH_CAP)."""
        tokens, length = self._tokens, 0
        while length < MATCH_CAP and earlier - length >= 0 and tokens[earlier - length] == tokens[end - length]:
            length += 1
        return length

    def lookup(self, k: int) -> Lookup:
        """Up to k tokens that followed the best earlier occurrence of the longest suffix seen before."""
        if k <= 0:
            return Lookup()
        end = len(self._tokens) - 1
        for n in range(min(self.n_max, end + 1), self.n_min - 1, -1):
            ends = self._ends.get(tuple(self._tokens[end + 1 - n : end + 1]), [])
            candidates = [e for e in ends[-CANDIDATES - 1 :] if e < end][-CANDIDATES:]
            if candidates:
                # The longest agreement wins; among equals, the most recent (later text is likelier to be repeated).
                length, earlier = max((self._agreement(e, end), e) for e in candidates)
                return Lookup(self._tokens[earlier + 1 : min(earlier + 1 + k, end + 1)], length)
        return Lookup()

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        tokens = self.lookup(k).tokens
        return Draft.deterministic(tokens, sampling)

    def advance(self, tokens: Sequence[int]) -> None:
        self._extend(tokens)


def build(sources: DraftSources) -> Drafter:
    return NgramDrafter()
