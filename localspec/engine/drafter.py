"""Drafters propose the tokens the target then verifies in one pass.

The draft model keeps its KV cache in step with the target's accepted text
without ever decoding an accepted token twice: a drafted token already sits in
the draft's cache when it is accepted, so only the target's own next token
(and, after a full acceptance, the last draft token, which was never decoded)
is fed in on the next step. llama.cpp's draft-simple instead re-evaluates the
whole verified batch in the draft; that is the cost saved here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from localspec.engine.model import Model
from localspec.engine.sampling import Distribution, SamplingParams, distribution, greedy_with_confidence
from localspec.engine.stats import GenerationStats


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # q for each token, only when the draft was sampled (temperature > 0, speculative sampling).
    dists: list[Distribution] = field(default_factory=list)


class Drafter(Protocol):
    name: str
    decode_ns: int  # time spent inside llama_decode, for the Python-overhead figure

    def start(self, prompt: Sequence[int]) -> None:
        """A generation begins from `prompt` (at least one token)."""

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        """Up to `k` tokens continuing the accepted text; `sampling` None means greedy."""

    def commit(self, n_accepted: int, token: int) -> None:
        """The target kept `n_accepted` of this drafter's tokens, then appended `token`."""

    def follow(self, tokens: Sequence[int]) -> None:
        """Another drafter proposed this step: the accepted text grew by `tokens`."""

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        """The target verified `n_verified` tokens in `verify_ms`; a drafter that learns costs, or reports choices, does it here."""


class NoDrafter:
    """Plain decoding: proposes nothing, so every step is one target token."""

    name = "none"
    decode_ns = 0

    def start(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        return Draft()

    def commit(self, n_accepted: int, token: int) -> None:
        pass

    def follow(self, tokens: Sequence[int]) -> None:
        pass

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass


class ModelDrafter:
    """A small model of the target's family drafts autoregressively."""

    name = "draft-model"

    def __init__(self, model: Model) -> None:
        self.model = model
        self.decode_ns = 0
        self._pending: list[int] = []  # accepted tokens not yet in the draft's cache
        self._drafted: list[int] = []
        self._n_decoded_drafts = 0  # how many of _drafted sit in the cache
        self._base = 0  # cache length before the current draft's tokens

    def start(self, prompt: Sequence[int]) -> None:
        self.model.prefill(prompt[:-1])  # prompt time, which the decoder measures itself
        self._pending = [prompt[-1]]
        self._drafted = []
        self._n_decoded_drafts = 0

    def _decode(self, tokens: list[int]) -> np.ndarray:
        start = time.perf_counter_ns()
        n_batch = self.model.n_batch
        while len(tokens) > n_batch:  # a long run of plain steps left many tokens pending
            self.model.decode(tokens[:n_batch], outputs=0)
            tokens = tokens[n_batch:]
        rows = self.model.decode(tokens, outputs=1)
        self.decode_ns += time.perf_counter_ns() - start
        return rows[0]

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        draft = Draft()
        self._drafted = draft.tokens
        self._n_decoded_drafts = 0
        if k <= 0:
            self._base = self.model.n_past
            return draft
        row = self._decode(self._pending)
        self._pending = []
        self._base = self.model.n_past
        while True:
            if sampling is None:
                if p_min > 0.0:
                    token, confidence = greedy_with_confidence(row)
                    if confidence < p_min:
                        break
                else:
                    token = int(row.argmax())
                draft.tokens.append(token)
            else:
                q = distribution(row, sampling)
                if q.top_prob < p_min:
                    break
                draft.tokens.append(q.sample(rng))
                draft.dists.append(q)
            if len(draft.tokens) == k:
                break
            row = self._decode(draft.tokens[-1:])
            self._n_decoded_drafts += 1
        return draft

    def commit(self, n_accepted: int, token: int) -> None:
        kept_in_cache = min(n_accepted, self._n_decoded_drafts)
        self.model.truncate(self._base + kept_in_cache)
        self._pending += self._drafted[kept_in_cache:n_accepted] + [token]
        self._drafted = []
        self._n_decoded_drafts = 0

    def follow(self, tokens: Sequence[int]) -> None:
        """Accepted text this drafter did not propose: decoded lazily, in one batch, the next time it drafts."""
        self._pending += list(tokens)

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass

    @property
    def pending_tokens(self) -> int:
        """Accepted tokens the draft has not decoded yet: the catch-up its next draft pays for."""
        return len(self._pending)
