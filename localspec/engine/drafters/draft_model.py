"""The draft model drafts autoregressively (`model`, and `self`, whose model is the target cut short).

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

import numpy as np

from localspec.engine.drafters.base import Draft, Drafter, DraftSources
from localspec.engine.llama.model import Model
from localspec.engine.sampling import Distribution, SamplingParams, distribution, greedy_with_confidence


def next_draft_token(row: np.ndarray, p_min: float, sampling: SamplingParams | None,
                     rng: np.random.Generator) -> tuple[int, Distribution | None] | None:
    """The draft's next token from its logits `row`, greedy (sampling None) or drawn from q (then with q); None where the
    draft's best token is less likely than p_min, which ends the draft there. Every draft model's token, for one
    sequence or for a batch of slots, is chosen here."""
    if sampling is None:
        if p_min <= 0.0:
            return int(row.argmax()), None
        token, confidence = greedy_with_confidence(row)
        return (token, None) if confidence >= p_min else None
    q = distribution(row, sampling)
    return (q.sample(rng), q) if q.top_prob >= p_min else None


class ModelDrafter(Drafter):
    """A small model of the target's family drafts autoregressively."""

    name = "model"

    def __init__(self, model: Model, name: str = "model", lazy_start: bool = False) -> None:
        self.model = model
        self.models = (model,)
        self.name = name
        self.lazy_start = lazy_start  # read the prompt only when first asked to draft (auto may never ask)
        self._pending: list[int] = []  # accepted tokens not yet in the draft's cache
        self._speculated: list[int] = []  # tokens in the cache past the accepted text (drafted, not yet judged)
        # This step's passes, (tokens, ms): each timed from its decode to the next one's, so that the choice of its token
        # (sampling, the p-min test) is in it, as in the cost a controller prices a draft token at.
        self.passes: list[tuple[int, float]] = []
        self._open_pass: tuple[int, int] | None = None  # (tokens, start ns) of the pass still being timed

    def start(self, prompt: Sequence[int]) -> None:
        if self.lazy_start:  # the first draft catches up on the prompt, and pays for it then
            self._pending = list(prompt[self.model.keep_cached_prefix(prompt[:-1]) :])
        else:
            self.model.prefill(prompt[:-1])  # prompt time, which the decoder measures itself
            self._pending = [prompt[-1]]
        self._speculated = []

    def _decode(self, tokens: list[int], outputs: int = 1) -> np.ndarray:
        """Decode `tokens` and return the logits of the last `outputs`, in as many batches as n_batch requires.

        A long run of plain steps can leave more than n_batch tokens pending; the earlier batches then carry
        no outputs, and the last holds every token whose row was asked for, so the rows always align.
        """
        self._time_pass(len(tokens))
        outputs = min(outputs, len(tokens))
        n_batch = self.model.n_batch
        head, tail = tokens[: len(tokens) - outputs], tokens[len(tokens) - outputs :]
        while len(head) + len(tail) > n_batch and head:
            n = min(len(head), n_batch)
            self.model.decode(head[:n], outputs=0)
            head = head[n:]
        return self.model.decode(head + tail, outputs=outputs)

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
        self._time_pass(None)
        return draft

    def _time_pass(self, n_tokens: int | None) -> None:
        """Close the pass being timed (its token is chosen by now) and, unless None, open one of `n_tokens`."""
        now = time.perf_counter_ns()
        if self._open_pass is not None:
            self.passes.append((self._open_pass[0], (now - self._open_pass[1]) / 1e6))
        self._open_pass = None if n_tokens is None else (n_tokens, now)

    def extend_greedy_or_sampled(
        self, draft: Draft, row: np.ndarray, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator
    ) -> None:
        """Append up to `k` tokens to `draft`, starting from the logits `row`; each but the last is decoded into the cache."""
        for n in range(1, k + 1):
            chosen = next_draft_token(row, p_min, sampling, rng)
            if chosen is None:
                return
            draft.append(*chosen)
            if n < k:
                row = self.step(chosen[0])

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
        self.passes, self._open_pass = [], None  # a new step

    @property
    def pending_tokens(self) -> int:
        """Accepted tokens the draft has not decoded yet: the catch-up its next draft pays for."""
        return len(self._pending)


def build_model(sources: DraftSources) -> Drafter:
    return ModelDrafter(sources.draft_model())


def build_self(sources: DraftSources) -> Drafter:
    return ModelDrafter(sources.self_draft(), name="self")
