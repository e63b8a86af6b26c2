"""A draft model of another tokenizer than the target's (`bridged`): it drafts in its own tokens, and text carries the
proposal across (text_bridge.py).

The draft model itself is driven as the `model` drafter drives one (draft_model.py: its own cache, catch-up, rollback
of whatever memory it has, every asking sequence in one pass a position), in its own tokens. What this drafter adds is
the translation at both ends of a step, per sequence:
- a chat reaches the draft under its own chat template (a raw prompt, or a draft without a template, as the target's
  prompt spelled out: text_bridge.draft_prompt);
- the accepted text the draft has not read waits as bytes (`unread`), and is re-tokenized for the draft only when a
  draft is asked, all at once, so a word the target wrote in pieces reaches the draft as the draft would spell it;
- the draft's tokens become text, the text the target's tokens after the answer's last few (`to_target`);
- after the target's verdict, the draft keeps those of its tokens that the accepted text holds whole, byte for byte.

Greedy, the proposal is deterministic (a one-hot q): the target's exact match keeps its own tokens (SLEM). Sampled,
the draft samples only the tokens both vocabularies share, each one target token, from its q restricted to them and
renormalised (TLI): standard speculative sampling then keeps the target's distribution exactly (verify.py). Where the
vocabularies share too little (TLI_MIN_OVERLAP), a sampled answer is drafted greedily and judged by exact match, which
keeps the distribution too, at a lower acceptance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from localspec.engine.chat import render_messages
from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources, Measured, Observation, Prompt, PromptRead
from localspec.engine.drafters.draft_model import DraftOrder, ModelDrafter
from localspec.engine.drafters.registry import Part
from localspec.engine.drafters.text_bridge import (
    LOOKBEHIND,
    byte_tokens,
    draft_prompt,
    kept_prefix,
    proposal_text,
    shared_tokens,
    text_of,
    to_target,
    valid_text,
    whole_characters,
)
from localspec.engine.errors import ChatTemplateError
from localspec.engine.llama.model import Model
from localspec.engine.sampling import Distribution
from localspec.engine.tuning import TLI_MIN_OVERLAP


@dataclass
class _Sequence:
    unread: bytearray  # accepted text the draft has not read
    prompt_ratio: float  # the draft's prompt tokens per target prompt token: how far the draft reads along
    tokens_per_byte: float  # the draft's prompt tokens per byte of its text: what its unread text will cost to read
    recent: list[int] = field(default_factory=list)  # the answer's last target tokens: the window a proposal follows
    speculated: list[int] = field(default_factory=list)  # the draft's tokens past its accepted text, since the last draft


class BridgedDrafter(Drafter):
    """The draft model of another vocabulary, proposing the target's tokens for every sequence asking at once."""

    name = "bridged"

    def __init__(self, target: Model, draft: Model, lazy_start: bool = False) -> None:
        self.target_vocab, self.draft_vocab = target.vocab, draft.vocab
        self.inner = ModelDrafter(draft, name=self.name, lazy_start=lazy_start)
        self.models = self.inner.models
        self._seqs: dict[int, _Sequence] = {}
        self._shared: np.ndarray | None = None  # draft token -> the target's token of the same bytes (-1: none); on first use
        self._overlap: float | None = None  # the share of the draft's vocabulary the target has too; on first use
        self._byte_tokens: dict[int, int] | None = None
        self._bridge_ns = 0

    def measured(self) -> Measured:
        return Measured({"translation": self._bridge_ns})

    @property
    def passes(self) -> list[tuple[int, float]]:
        """The last draft's passes, (draft tokens, ms), as ModelDrafter's: auto prices the draft model by them."""
        return self.inner.passes

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        """The draft reads the chat under its own template where the request is one and the draft has a template; else
        the target's prompt spelled out (draft_prompt)."""
        start = time.perf_counter_ns()
        own, n_bytes = self._own_chat(prompt.conversation if isinstance(prompt, Prompt) else ())
        if own:
            tokens, rest = own, b""
        else:
            tokens, rest, n_bytes = draft_prompt(self.target_vocab, self.draft_vocab, prompt)
        self._seqs[seq] = _Sequence(bytearray(rest), len(tokens) / max(1, len(prompt)), len(tokens) / max(1, n_bytes))
        self._bridge_ns += time.perf_counter_ns() - start
        self.inner.begin(seq, tokens)

    def _own_chat(self, conversation: Sequence[Mapping[str, Any]]) -> tuple[list[int], int]:
        """The chat rendered by the draft's own template, and its length in bytes (no tokens for a raw prompt, or where
        the draft has no usable template)."""
        if not conversation:
            return [], 0
        try:
            data = render_messages(self.inner.model, [dict(message) for message in conversation]).encode("utf-8")
        except ChatTemplateError:
            return [], 0
        return self.draft_vocab.tokenize_bytes(data, add_special=False, parse_special=True), len(data)

    def observe(self, seen: Observation) -> None:
        """As the target reads `n` prompt tokens, the draft reads as large a share of its own."""
        if isinstance(seen, PromptRead):
            self.inner.observe(PromptRead(seen.seq, int(seen.n * self._seqs[seen.seq].prompt_ratio)))

    def pending_tokens(self, seq: int) -> int:
        """The draft's catch-up before its next draft: its unread tokens, and the accepted text not yet tokenized for it,
        counted at the prompt's tokens per byte (auto asks every step: tokenizing the text each time would cost more
        than the step's bookkeeping)."""
        state = self._seqs.get(seq)
        if state is None:
            return 0
        return self.inner.pending_tokens(seq) + math.ceil(len(state.unread) * state.tokens_per_byte)

    @property
    def shared(self) -> np.ndarray:
        """The vocabularies' intersection (text_bridge.shared_tokens), found when a sampled answer first drafts."""
        if self._shared is None:
            start = time.perf_counter_ns()
            self._shared = shared_tokens(self.target_vocab, self.draft_vocab)
            self.inner.within = self._shared >= 0
            self._bridge_ns += time.perf_counter_ns() - start
        return self._shared

    @property
    def byte_tokens(self) -> dict[int, int]:
        """The draft's tokens of one byte each (text_bridge.byte_tokens), found when an answer first ends inside a character."""
        if self._byte_tokens is None:
            start = time.perf_counter_ns()
            self._byte_tokens = byte_tokens(self.draft_vocab)
            self._bridge_ns += time.perf_counter_ns() - start
        return self._byte_tokens

    @property
    def overlap(self) -> float:
        """The share of the draft's vocabulary the target has too (every sampled step asks: found once)."""
        if self._overlap is None:
            self._overlap = float(np.mean(self.shared >= 0))
        return self._overlap

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return self.draft([DraftOrder.of(ask, greedy=ask.sampling is None or self.overlap < TLI_MIN_OVERLAP) for ask in asks])

    def draft(self, orders: Sequence[DraftOrder]) -> list[Draft]:
        """A draft per order in the target's tokens: each order's `after` (target tokens, a lookup's run) is read as
        speculation first, as the model drafter reads it."""
        start = time.perf_counter_ns()
        inner_orders, lags = [], []
        for order in orders:
            state = self._seqs[order.seq]
            whole = whole_characters(state.unread)
            if whole:  # the accepted text, re-tokenized in one piece
                self.inner.accept(order.seq, self.draft_vocab.tokenize_bytes(bytes(state.unread[:whole]), False, False))
                del state.unread[:whole]
            ahead = bytes(state.unread) + text_of(self.target_vocab, order.after)
            whole = whole_characters(ahead)
            after = self.draft_vocab.tokenize_bytes(ahead[:whole], False, False) if whole else []
            if whole < len(ahead) and all(byte in self.byte_tokens for byte in ahead[whole:]):  # part of a character, byte by byte
                after += [self.byte_tokens[byte] for byte in ahead[whole:]]
                whole = len(ahead)
            if not after and self.inner.pending_tokens(order.seq) == 0:  # its last token's row is needed again
                self.inner.reread_last(order.seq)
            # Its positions count the target's tokens, these the draft's: keyed noise then couples no draft token, and
            # each is still judged by exact match.
            inner_orders.append(DraftOrder(order.seq, order.k, order.p_min, order.sampling, order.draws, order.position, after))
            lags.append(ahead[whole:])
        self._bridge_ns += time.perf_counter_ns() - start
        drafted = self.inner.draft(inner_orders)
        start = time.perf_counter_ns()
        drafts = []
        for order, inner_order, lag, draft in zip(orders, inner_orders, lags, drafted):
            state = self._seqs[order.seq]
            state.speculated = [*inner_order.after, *draft.tokens]
            if draft.dists:  # sampled over the shared tokens: each is one target token, with its q
                drafts.append(self._in_target_tokens(draft) if not lag else Draft())
                continue
            text = proposal_text(self.draft_vocab, draft.tokens)
            tokens: list[int] = []
            if text.startswith(lag):  # the draft goes on from the character the accepted text ends inside of
                text = valid_text(text)[len(lag):]
                if text:
                    tokens = to_target(self.target_vocab, [*state.recent, *order.after], text)[: order.k]
            drafts.append(Draft.deterministic(tokens, order.sampling))
        self._bridge_ns += time.perf_counter_ns() - start
        return drafts

    def _in_target_tokens(self, draft: Draft) -> Draft:
        """A draft sampled over the shared tokens, token for token and q for q in the target's ids."""
        shared = self.shared
        return Draft([int(shared[token]) for token in draft.tokens], [Distribution(shared[q.ids], q.probs) for q in draft.dists])

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        """The accepted text grows by `tokens` (target tokens): the draft keeps the tokens it speculated that the text
        holds whole, and the rest waits as bytes until the next draft."""
        start = time.perf_counter_ns()
        state = self._seqs[seq]
        accepted = bytes(state.unread) + text_of(self.target_vocab, tokens)
        kept, n_bytes = kept_prefix(self.draft_vocab, state.speculated, accepted)
        self.inner.accept(seq, state.speculated[:kept])
        state.unread = bytearray(accepted[n_bytes:])
        state.speculated = []
        state.recent = [*state.recent, *tokens][-LOOKBEHIND:]
        self._bridge_ns += time.perf_counter_ns() - start

    def end(self, seq: int) -> None:
        self.inner.end(seq)

    def close(self) -> None:
        self.inner.close()


def build(sources: DraftSources) -> Drafter:
    return BridgedDrafter(sources.target, sources.part(Part.DRAFT_MODEL))
