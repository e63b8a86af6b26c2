"""The draft model drafting for every slot at once: one pass per draft position, one token per drafting slot.

Each slot's sequence in the draft's cache is kept in step with the slot's settled
text without decoding anything twice: drafted tokens that the target accepted
stay; the rest is cut, and what the draft has not read yet (the target's own
tokens, a new prompt) goes into the first pass, which also yields every slot's
first draft token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.engine.batch.slot import Slot
from localspec.engine.drafters.base import Draft
from localspec.engine.drafters.draft_model import next_draft_token
from localspec.engine.llama.model import Model
from localspec.engine.sampling import SamplingParams
from localspec.engine.tokens import common_prefix


@dataclass
class DraftOrder:
    """Draft up to k tokens for a slot: greedily (sampling None) or sampled from q, stopping below p_min; after reading
    `after` (a hybrid step's lookup tokens), so the draft continues from their end."""

    slot: Slot
    k: int
    p_min: float
    sampling: SamplingParams | None
    rng: np.random.Generator
    after: Sequence[int] = ()


@dataclass
class _Drafting:
    order: DraftOrder
    draft: Draft
    done: bool = False


class BatchDraftModel:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.passes: list[tuple[int, float]] = []  # (tokens, ms) of the last draft's passes, its catch-up first

    def sync(self, slot: Slot, text: Sequence[int]) -> list[int]:
        """Cut the slot's draft sequence back to what it shares with `text`; the part of `text` it has yet to read."""
        keep = common_prefix(slot.draft_cached, text)
        if keep < len(slot.draft_cached):
            self.model.forget(slot.seq, keep)
        return list(text[keep:])

    def read(self, slots: Sequence[Slot]) -> None:
        """Bring the slots' draft sequences up to what the target has read of their prompts (no logits): the draft
        keeps up while the target reads, so its first draft does not pay for the whole prompt at once."""
        entries = []
        for slot in slots:
            unread = self.sync(slot, slot.cached)
            entries += [(token, len(slot.draft_cached) + i, slot.seq, False) for i, token in enumerate(unread)]
        for start in range(0, len(entries), self.model.n_batch):
            self.model.decode_sequences(entries[start : start + self.model.n_batch])

    def draft(self, orders: Sequence[DraftOrder]) -> dict[int, Draft]:
        """Drafts by slot sequence id: the catch-up pass gives each slot's first token, then one pass per position."""
        self.passes = []
        work = [_Drafting(order, Draft()) for order in orders if order.k > 0]
        entries: list[tuple[int, int, int, bool]] = []
        owners: list[_Drafting] = []
        for item in work:
            slot = item.order.slot
            # the last token is always unread; the last of these gives the first row
            unread = [*self.sync(slot, slot.cached), slot.last, *item.order.after]
            entries += [(token, len(slot.draft_cached) + i, slot.seq, i == len(unread) - 1) for i, token in enumerate(unread)]
            owners.append(item)
        start = time.perf_counter_ns()
        self._decode_and_choose(entries, owners)
        self.passes.append((len(entries), (time.perf_counter_ns() - start) / 1e6))
        while active := [item for item in work if not item.done]:
            entries = []
            for item in active:
                slot, token = item.order.slot, item.draft.tokens[-1]
                entries.append((token, len(slot.draft_cached), slot.seq, True))
            start = time.perf_counter_ns()
            self._decode_and_choose(entries, active)
            self.passes.append((len(entries), (time.perf_counter_ns() - start) / 1e6))
        return {item.order.slot.seq: item.draft for item in work}

    def _decode_and_choose(self, entries: list[tuple[int, int, int, bool]], owners: list[_Drafting]) -> None:
        """Decode (in n_batch pieces if a catch-up is long), choosing each owner's next token from its row as it comes."""
        owner_index = 0
        n_batch = self.model.n_batch
        for start in range(0, len(entries), n_batch):
            piece = entries[start : start + n_batch]
            rows = self.model.decode_sequences(piece)
            for row_index in range(sum(1 for entry in piece if entry[3])):
                self._choose(owners[owner_index], rows[row_index])
                owner_index += 1

    @staticmethod
    def _choose(item: _Drafting, row: np.ndarray) -> None:
        order = item.order
        chosen = next_draft_token(row, order.p_min, order.sampling, order.rng)
        if chosen is not None:
            item.draft.append(*chosen)
        item.done = chosen is None or len(item.draft.tokens) >= order.k
