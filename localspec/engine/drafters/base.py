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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from localspec.engine.model import Model
from localspec.engine.sampling import Distribution, SamplingParams, distribution, greedy_with_confidence
from localspec.engine.stats import GenerationStats


@dataclass
class Fork:
    """A tree draft's second branch: from draft position `at`, these tokens instead of the main chain's."""

    at: int
    tokens: list[int]


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # q for each token, only when the draft was sampled (temperature > 0, speculative sampling).
    dists: list[Distribution] = field(default_factory=list)
    fork: Fork | None = None  # tree drafts only

    @property
    def n_tokens(self) -> int:
        """Tokens the target verifies besides its own: both branches of a tree."""
        return len(self.tokens) + (len(self.fork.tokens) if self.fork else 0)

    def branch_length(self, branch: int) -> int:
        """Draft positions along the main chain (0) or along the fork (1)."""
        return len(self.tokens) if branch == 0 or self.fork is None else self.fork.at + len(self.fork.tokens)

    @property
    def depth(self) -> int:
        """The deepest draft position either branch reaches."""
        return max(self.branch_length(0), self.branch_length(1))

    @classmethod
    def deterministic(cls, tokens: list[int], sampling: SamplingParams | None, fork: Fork | None = None) -> Draft:
        """Tokens proposed without sampling (lookup, vetted or tree candidates): at T > 0 each carries a one-hot q."""
        return cls(tokens, one_hot(tokens) if sampling is not None else [], fork)


def one_hot(tokens: Sequence[int]) -> list[Distribution]:
    """q for tokens proposed deterministically: speculative sampling then keeps token x with probability p(x), exactly."""
    return [Distribution(np.array([t]), np.array([1.0])) for t in tokens]


class Drafter(Protocol):
    name: str
    decode_ns: int  # time spent inside llama_decode, for the Python-overhead figure

    def start(self, prompt: Sequence[int]) -> None:
        """A generation begins from `prompt` (at least one token)."""

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        """Up to `k` tokens continuing the accepted text; `sampling` None means greedy."""

    def advance(self, tokens: Sequence[int]) -> None:
        """The accepted text grew by `tokens`: this step's accepted draft tokens, then the target's own token.

        Every drafter hears every step, whether it proposed the tokens or not.
        """

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

    def advance(self, tokens: Sequence[int]) -> None:
        pass

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass


class ModelDrafter:
    """A small model of the target's family drafts autoregressively."""

    name = "draft-model"

    def __init__(self, model: Model, name: str = "draft-model", lazy_start: bool = False) -> None:
        self.model = model
        self.name = name
        self.lazy_start = lazy_start  # read the prompt only when first asked to draft (auto may never ask)
        self.decode_ns = 0
        self._pending: list[int] = []  # accepted tokens not yet in the draft's cache
        self._speculated: list[int] = []  # tokens in the cache past the accepted text (drafted, not yet judged)

    def start(self, prompt: Sequence[int]) -> None:
        if self.lazy_start:  # the first draft catches up on the prompt, and pays for it then
            self._pending = list(prompt[self.model.keep_cached_prefix(prompt[:-1]) :])
        else:
            self.model.prefill(prompt[:-1])  # prompt time, which the decoder measures itself
            self._pending = [prompt[-1]]
        self._speculated = []

    def _decode(self, tokens: list[int], outputs: int = 1) -> np.ndarray:
        start = time.perf_counter_ns()
        n_batch = self.model.n_batch
        while len(tokens) > n_batch:  # a long run of plain steps left many tokens pending
            self.model.decode(tokens[:n_batch], outputs=0)
            tokens = tokens[n_batch:]
        rows = self.model.decode(tokens, outputs=min(outputs, len(tokens)))
        self.decode_ns += time.perf_counter_ns() - start
        return rows

    def feed(self, prefix: Sequence[int], outputs: int = 1) -> np.ndarray:
        """Catch up on the pending accepted tokens, then decode `prefix` as speculation; logits of the last `outputs` tokens."""
        rows = self._decode(self._pending + list(prefix), outputs)
        self._pending = []
        self._speculated = list(prefix)
        return rows

    def step(self, token: int) -> np.ndarray:
        """Decode one speculated token; the logits that follow it."""
        row = self._decode([token])[-1]
        self._speculated.append(token)
        return row

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        return self.continue_after([], k, p_min, sampling, rng)

    def continue_after(self, prefix: Sequence[int], k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        """Draft up to `k` tokens that follow the accepted text plus `prefix` (tokens proposed by someone else)."""
        draft = Draft()
        if k <= 0:
            return draft
        row = self.feed(prefix)[-1]
        self.extend_greedy_or_sampled(draft, row, k, p_min, sampling, rng)
        return draft

    def extend_greedy_or_sampled(
        self, draft: Draft, row: np.ndarray, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator
    ) -> None:
        """Append up to `k` tokens to `draft`, starting from the logits `row`; each but the last is decoded into the cache."""
        n = 0
        while True:
            if sampling is None:
                if p_min > 0.0:
                    token, confidence = greedy_with_confidence(row)
                    if confidence < p_min:
                        return
                else:
                    token = int(row.argmax())
                draft.tokens.append(token)
            else:
                q = distribution(row, sampling)
                if q.top_prob < p_min:
                    return
                token = q.sample(rng)
                draft.tokens.append(token)
                draft.dists.append(q)
            n += 1
            if n == k:
                return
            row = self.step(token)

    def agreed_prefix(self, proposal: Sequence[int]) -> int:
        """How many leading tokens of `proposal` the draft itself would have chosen greedily (one batched pass)."""
        if not proposal:
            return 0
        rows = self.feed(proposal[:-1], outputs=len(proposal))
        best = rows.argmax(axis=1)
        n = 0
        while n < len(proposal) and best[n] == proposal[n]:
            n += 1
        self.rewind(keep=n)
        return n

    def rewind(self, keep: int) -> None:
        """Keep only the first `keep` speculated tokens in the cache."""
        if keep < len(self._speculated):
            self.model.truncate(self.model.n_past - len(self._speculated) + keep)
            del self._speculated[keep:]

    def advance(self, tokens: Sequence[int]) -> None:
        """Speculated tokens that were accepted stay in the cache; the rest of the new text is decoded lazily, in one batch."""
        keep = 0
        while keep < min(len(self._speculated), len(tokens)) and self._speculated[keep] == tokens[keep]:
            keep += 1
        self.rewind(keep)
        self._speculated = []
        self._pending += list(tokens[keep:])

    def observe_step(self, n_verified: int, verify_ms: float, stats: GenerationStats) -> None:
        pass

    @property
    def pending_tokens(self) -> int:
        """Accepted tokens the draft has not decoded yet: the catch-up its next draft pays for."""
        return len(self._pending)
