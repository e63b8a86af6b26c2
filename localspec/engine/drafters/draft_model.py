"""The draft model drafts autoregressively (`model`, and `self`, whose model is the target cut short), for every
sequence asking at once: one pass per draft position, one token per sequence still drafting.

The draft model keeps each sequence's KV cells in step with its accepted text
without ever decoding an accepted token twice: a drafted token already sits in
the draft's cache when it is accepted, so only the target's own next token
(and, after a full acceptance, the last draft token, which was never decoded)
is fed in on the next step, in the pass that yields the first draft token.
llama.cpp's draft-simple instead re-evaluates the whole verified batch in the
draft; that is the cost saved here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources, Observation, PromptRead
from localspec.engine.drafters.registry import Part
from localspec.engine.llama.entry import Entry
from localspec.engine.llama.memory import MemoryKind
from localspec.engine.llama.model import Model
from localspec.engine.sampling import Distribution, Draws, SamplingParams, distribution, greedy_with_confidence
from localspec.engine.tokens import common_prefix


def next_draft_token(row: np.ndarray, p_min: float, sampling: SamplingParams | None, draws: Draws, position: int,
                     within: np.ndarray | None = None) -> tuple[int, Distribution | None] | None:
    """The draft's next token from its logits `row`, greedy (sampling None) or drawn from q for answer position
    `position` with the answer's draws (then with q); None where the
    draft's best token is less likely than p_min, which ends the draft there. Every draft model's token, for one
    sequence or for a batch of slots, is chosen here. `within` (a mask over the draft's vocabulary) restricts q to the
    tokens it marks: a draft of another tokenizer samples only tokens the target has too (bridged.py)."""
    if sampling is None:
        if p_min <= 0.0:
            return int(row.argmax()), None
        token, confidence = greedy_with_confidence(row)
        return (token, None) if confidence >= p_min else None
    q = distribution(row, sampling)
    if within is not None:
        kept = within[q.ids]
        if not kept.any():
            return None
        q = Distribution(q.ids[kept], q.probs[kept] / q.probs[kept].sum())
    return (draws.choose(q, position), q) if q.top_prob >= p_min else None


@dataclass
class DraftOrder:
    """Draft up to k tokens for sequence `seq` (an Ask's terms), after reading `after` (a hybrid step's lookup tokens),
    so the draft continues from their end, its first token at answer position `position`."""

    seq: int
    k: int
    p_min: float
    sampling: SamplingParams | None
    draws: Draws
    position: int
    after: Sequence[int] = ()

    @classmethod
    def of(cls, ask: Ask, after: Sequence[int] = (), k: int | None = None, greedy: bool = False) -> DraftOrder:
        """The order an ask makes; another `k`, or greedy drafting whatever the temperature, where the drafter says so."""
        return cls(ask.seq, ask.k if k is None else k, ask.p_min, None if greedy else ask.sampling, ask.draws, ask.position + len(after), after)


@dataclass
class _Sequence:
    pending: list[int]  # accepted tokens not yet in the draft's cache
    speculated: list[int] = field(default_factory=list)  # tokens in the cache past the accepted text (drafted, not yet judged)


@dataclass
class _Drafting:
    order: DraftOrder
    draft: Draft
    done: bool = False


class ModelDrafter(Drafter):
    """A small model of the target's family drafts autoregressively, for every sequence asking in one pass a position."""

    name = "model"

    def __init__(self, model: Model, name: str = "model", lazy_start: bool = False) -> None:
        self.model = model
        self.within: np.ndarray | None = None  # the draft tokens a sampled draft may propose (None: all of them)
        self.models = (model,)
        self.name = name
        self.lazy_start = lazy_start  # read a prompt only when first asked to draft (auto may never ask)
        self._seqs: dict[int, _Sequence] = {}
        # The last draft's passes, (tokens, ms), its catch-up first: each timed with the choice of its tokens (sampling,
        # the p-min test), as in the cost a controller prices a draft token at.
        self.passes: list[tuple[int, float]] = []

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        """The sequence keeps the longest prefix of the prompt that its cells, or another sequence's, hold (borrowed as
        the target's slots borrow theirs); the rest is read along (read) or, lazily, in the first draft's pass."""
        tokens = prompt[:-1]
        cells = self.model.cells.tokens
        keep = common_prefix(cells[seq], tokens)
        lent, donor = max((self.model.lendable(other, common_prefix(held, tokens)), other)
                          for other, held in enumerate(cells) if other != seq) if len(cells) > 1 else (0, seq)
        if lent > keep:
            self.model.forget(seq)
            self.model.share_cells(donor, seq, lent)
            keep = lent
        else:
            keep = self.model.forget(seq, keep)
        self._seqs[seq] = _Sequence(list(prompt[keep:]))

    def observe(self, seen: Observation) -> None:
        """Read along as the target reads a prompt (unless lazy): what the target read that the draft has not, never the
        prompt's last token, which the first draft's pass reads."""
        if self.lazy_start or not isinstance(seen, PromptRead):
            return
        state = self._seqs[seen.seq]
        unread = min(seen.n - len(self.model.cells.tokens[seen.seq]), len(state.pending) - 1)
        if unread > 0:
            self._decode(seen.seq, state.pending[:unread], outputs=0)
            del state.pending[:unread]

    def pending_tokens(self, seq: int) -> int:
        """Accepted tokens the draft has not decoded yet for `seq`: the catch-up its next draft pays for."""
        state = self._seqs.get(seq)
        return len(state.pending) if state is not None else 0

    def reread_last(self, seq: int) -> None:
        """Make `seq`'s last cached token pending again, so its next pass yields the row after it: a draft fed through
        text (bridged.py) may have been given nothing new to read."""
        cells = self.model.cells.tokens[seq]
        held_before = list(cells)
        held = self.model.forget(seq, len(cells) - 1)
        self._seqs[seq].pending[:0] = held_before[held:]

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return self.draft([DraftOrder.of(ask, ask.after) for ask in asks])

    def draft(self, orders: Sequence[DraftOrder]) -> list[Draft]:
        """A draft per order: the first pass reads what each sequence has yet to read (its pending tokens, then `after`)
        and gives each one's first token; then one pass per position, one token for each sequence still drafting."""
        self.passes = []
        work = [_Drafting(order, Draft()) for order in orders]
        active = [item for item in work if item.order.k > 0]
        if len(active) == 1:
            self._draft_alone(active[0])
        elif active:
            self._draft_together(active)
        return [item.draft for item in work]

    def _draft_alone(self, item: _Drafting) -> None:
        """One sequence's draft, in as few operations between passes as its loop allows: every lone answer drafts here,
        and what runs between a pass and the next adds to the time per token."""
        order, draft = item.order, item.draft
        tokens = self._unread(order.seq, order.after)
        speculated = self._seqs[order.seq].speculated
        while True:
            start = time.perf_counter_ns()
            chosen = next_draft_token(self._decode(order.seq, tokens, 1)[-1], order.p_min, order.sampling, order.draws,
                                      order.position + len(draft.tokens), self.within)
            self.passes.append((len(tokens), (time.perf_counter_ns() - start) / 1e6))
            if chosen is None:
                return
            draft.append(*chosen)
            if len(draft.tokens) >= order.k:
                return
            tokens = [chosen[0]]
            speculated.append(chosen[0])

    def _draft_together(self, active: list[_Drafting]) -> None:
        entries: list[Entry] = []
        for item in active:
            entries += self._entries(item.order.seq, self._unread(item.order.seq, item.order.after), 1)
        while active:
            start = time.perf_counter_ns()
            for item, row in zip(active, self._rows(entries), strict=True):
                order = item.order
                chosen = next_draft_token(row, order.p_min, order.sampling, order.draws, order.position + len(item.draft.tokens), self.within)
                if chosen is not None:
                    item.draft.append(*chosen)
                item.done = chosen is None or len(item.draft.tokens) >= order.k
            self.passes.append((len(entries), (time.perf_counter_ns() - start) / 1e6))
            active = [item for item in active if not item.done]
            entries = []
            for item in active:
                token = item.draft.tokens[-1]
                entries += self._entries(item.order.seq, [token], 1)
                self._seqs[item.order.seq].speculated.append(token)

    def _unread(self, seq: int, speculation: Sequence[int]) -> list[int]:
        """What `seq`'s next pass reads: its pending tokens, then `speculation`, which its cells then hold past the
        accepted text."""
        state = self._seqs[seq]
        tokens = [*state.pending, *speculation]
        state.pending, state.speculated = [], list(speculation)
        return tokens

    def _entries(self, seq: int, tokens: Sequence[int], rows: int) -> list[Entry]:
        """`tokens` as a pass's entries for `seq`, placed after its cells, the last `rows` asking for logits."""
        pos0, first_row = len(self.model.cells.tokens[seq]), len(tokens) - rows
        return [Entry(token, pos0 + i, seq, i >= first_row) for i, token in enumerate(tokens)]

    def _rows(self, entries: list[Entry]) -> Iterator[np.ndarray]:
        """Decode the entries (in n_batch pieces if a catch-up is long), each row asked for as its piece comes: a row is
        llama.cpp's buffer, valid until the next pass."""
        n_batch = self.model.n_batch
        for start in range(0, len(entries), n_batch):
            yield from self.model.decode_sequences(entries[start : start + n_batch])

    def _decode(self, seq: int, tokens: Sequence[int], outputs: int) -> np.ndarray:
        """Append `tokens` to `seq`'s cells; the logits of the last `outputs`. A long catch-up goes in n_batch pieces,
        the earlier ones asking no rows, so the rows always come from one pass. Sequence 0 takes the model's
        one-sequence pass, which places its tokens in one call."""
        outputs = min(outputs, len(tokens))
        n_batch = self.model.n_batch
        while len(tokens) > n_batch and len(tokens) - outputs > 0:
            n = min(len(tokens) - outputs, len(tokens) - n_batch, n_batch)
            self._pass(seq, tokens[:n], 0)
            tokens = tokens[n:]
        return self._pass(seq, tokens, outputs)

    def _pass(self, seq: int, tokens: Sequence[int], outputs: int) -> np.ndarray:
        if seq == 0:
            return self.model.decode(tokens, outputs)
        return self.model.decode_sequences(self._entries(seq, tokens, outputs))

    def feed(self, seq: int, prefix: Sequence[int], outputs: int = 1) -> np.ndarray:
        """Catch `seq` up on its pending tokens, then decode `prefix` as speculation; logits of the last `outputs` tokens."""
        return self._decode(seq, self._unread(seq, prefix), outputs)

    def step(self, seq: int, token: int) -> np.ndarray:
        """Decode one speculated token; the logits that follow it."""
        row = self._decode(seq, [token], 1)[-1]
        self._seqs[seq].speculated.append(token)
        return row

    def agreed_prefixes(self, proposals: Sequence[tuple[int, Sequence[int]]]) -> list[int]:
        """For each (sequence, proposal), how many leading tokens of the proposal the draft itself would have chosen
        greedily: every sequence's vetting in one batched pass (in n_batch pieces if a catch-up is long)."""
        entries: list[Entry] = []
        owners: list[int] = []  # the proposal each row vets, in entry order
        for index, (seq, proposal) in enumerate(proposals):
            if proposal:  # the last pending token's row judges the proposal's first token
                entries += self._entries(seq, self._unread(seq, proposal[:-1]), len(proposal))
                owners += [index] * len(proposal)
        chosen: list[list[int]] = [[] for _ in proposals]
        for index, row in zip(owners, self._rows(entries), strict=True):
            chosen[index].append(int(row.argmax()))
        agreed = []
        for (seq, proposal), best in zip(proposals, chosen):
            n = common_prefix(best, proposal)
            if proposal:
                self.rewind(seq, keep=n)
            agreed.append(n)
        return agreed

    def rewind(self, seq: int, keep: int) -> None:
        """Keep only the first `keep` speculated tokens of `seq` in the cache."""
        state = self._seqs[seq]
        speculated = state.speculated
        if keep < len(speculated):
            cells = self.model.cells.tokens[seq]
            wanted = len(cells) - len(speculated) + keep
            held_before = cells[:wanted] if self.model.memory is not MemoryKind.ATTENTION else []
            held = self.model.forget(seq, wanted)
            del speculated[keep:]
            if held < wanted:  # a recurrent draft could not drop only its speculation: it reads again what it lost
                state.pending[:0] = held_before[held:]
                state.speculated = speculated = []

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        """Speculated tokens that were accepted stay in the cache; the rest of the new text is read in the next draft's
        first pass. At least the last token is read again: where the draft had speculated all of them (a tree's fork
        that the target took after its pass verified the main chain alone), its next draft needs that token's row."""
        state = self._seqs[seq]
        speculated = state.speculated
        keep = 0
        while keep < min(len(speculated), len(tokens) - 1) and speculated[keep] == tokens[keep]:
            keep += 1
        self.rewind(seq, keep)
        state.speculated = []
        state.pending += tokens[keep:]


def build_model(sources: DraftSources) -> Drafter:
    return ModelDrafter(sources.part(Part.TARGET_TOKENIZER))


def build_self(sources: DraftSources) -> Drafter:
    return ModelDrafter(sources.part(Part.SELF_DRAFT), name="self")
