"""The target drafts for itself with its MTP layers (`mtp`): llama.cpp's draft-mtp, for every sequence asking at once.

The head's cell at position p is made from token p and the target's hidden row at p - 1, and predicts token p + 1. So
every pass the target makes is mirrored into the head (`target_read`), each token beside the row the target gave the
token before it, the first beside the row kept from the pass before (llama.cpp's pending_h); that keeps the head's
cache in step for the price of one block per token. Once the verdict is known (`accept`) the head drops the rejected
draft tokens' cells and keeps the target's row at the last accepted position. A draft then starts from the target's
own new token beside that row, and goes on from the head's own hidden row, one pass a position for all sequences.

What was drafted (the head's cells past the accepted text) is replaced by the next mirrored pass, which starts at the
same position. The head has no recurrent state, so on a hybrid target (Qwen3.5) only the target's own rollback knows its
memory kind; the head drops a tail as an attention cache does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources
from localspec.engine.drafters.draft_model import next_draft_token
from localspec.engine.llama.model import Model
from localspec.engine.llama.mtp_head import MtpHead
from localspec.engine.tokens import common_prefix


@dataclass
class _Sequence:
    last: int | None = None  # the target's newest token, which its next pass reads (None: its prompt is being read)
    first_pos: int = 0  # the position of the first row in `rows`
    rows: np.ndarray | None = None  # the target's hidden rows of the last pass that read this sequence (copies)
    pending_pos: int = -1  # the position whose target row comes before the next entry (-1: none kept)
    pending: np.ndarray | None = None


class MtpDrafter(Drafter):
    """Drafts with the target's own MTP head: no second model, the target's vocabulary by construction."""

    name = "mtp"

    def __init__(self, target: Model) -> None:
        self.head = MtpHead(target)
        self.models = (self.head,)
        self._seqs: dict[int, _Sequence] = {}
        self.passes: list[tuple[int, float]] = []  # the last draft's passes, (tokens, ms), as ModelDrafter's

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        """The head keeps the cells it shares with the prompt; the row kept from before still pairs with the next entry
        where its position lies within them."""
        if self.head.refresh():
            self._seqs.clear()
        keep = self.head.forget(seq, common_prefix(self.head.tokens[seq], prompt))
        state = self._seqs.get(seq, _Sequence())
        self._seqs[seq] = _Sequence(pending_pos=state.pending_pos, pending=state.pending) if state.pending_pos < keep else _Sequence()

    def target_read(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        """Mirror the target's pass into the head for this drafter's sequences; keep each one's rows for its verdict
        (a prompt's: its last row only)."""
        picked = [i for i, (_, _, seq, _) in enumerate(entries) if seq in self._seqs]
        if not picked:
            return
        if self.head.refresh():  # the target reopened its context: every sequence starts over
            for seq in self._seqs:
                self._seqs[seq] = _Sequence(last=self._seqs[seq].last)
        target_rows = self.head.target_rows(len(entries))
        hidden = np.zeros((len(picked), self.head.n_embd), dtype=np.float32)
        previous: dict[int, int] = {}  # each sequence's previous entry in the pass
        by_seq: dict[int, list[int]] = {}
        for j, i in enumerate(picked):
            _, pos, seq, _ = entries[i]
            state = self._seqs[seq]
            if seq in previous:
                hidden[j] = target_rows[previous[seq]]
            elif state.pending is not None and state.pending_pos == pos - 1:
                hidden[j] = state.pending
            previous[seq] = i
            by_seq.setdefault(seq, []).append(i)
        self.head.decode([(token, pos, seq, False) for token, pos, seq, _ in (entries[i] for i in picked)], hidden)
        for seq, indices in by_seq.items():
            state = self._seqs[seq]
            kept = indices if state.last is not None else indices[-1:]  # a prompt's tokens are all accepted text
            state.first_pos = entries[kept[0]][1]
            state.rows = target_rows[kept].copy()
            if state.last is None:  # the prompt's next pass, or its first token's draft, pairs with its last row
                state.pending_pos, state.pending = state.first_pos, state.rows[0]

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        """The target's last pass settled as `tokens` (its accepted draft tokens, then its own): the head keeps the cells
        of the accepted text, and the target's row at its end pairs with the own token when the next draft starts."""
        state = self._seqs.get(seq)
        if state is None or state.rows is None:
            return
        accepted = min(len(tokens) - 1, len(state.rows) - 1)
        state.pending_pos = state.first_pos + accepted
        state.pending = state.rows[accepted]
        state.last = tokens[-1]
        self.head.forget(seq, state.pending_pos + 1)

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        """Every asking sequence's draft, one head pass a position: its own token at its next position first."""
        self.passes = []
        drafts = [Draft() for _ in asks]
        active: list[int] = []  # asks still drafting, in entry order
        entries: list[tuple[int, int, int, bool]] = []
        rows: list[np.ndarray] = []
        for index, ask in enumerate(asks):
            state = self._seqs.get(ask.seq)
            if ask.k <= 0 or state is None or state.last is None:
                continue
            active.append(index)
            entries.append((state.last, state.pending_pos + 1, ask.seq, True))
            rows.append(state.pending if state.pending is not None else np.zeros(self.head.n_embd, dtype=np.float32))
        while active:
            start = time.perf_counter_ns()
            logits, hidden = self.head.decode(entries, np.stack(rows))
            still: list[int] = []
            next_entries: list[tuple[int, int, int, bool]] = []
            next_rows: list[np.ndarray] = []
            for j, index in enumerate(active):
                ask, draft = asks[index], drafts[index]
                chosen = next_draft_token(logits[j], ask.p_min, ask.sampling, ask.rng)
                if chosen is None:
                    continue
                draft.append(*chosen)
                if len(draft.tokens) < ask.k:
                    still.append(index)
                    next_entries.append((chosen[0], entries[j][1] + 1, ask.seq, True))
                    next_rows.append(hidden[j].copy())
            self.passes.append((len(entries), (time.perf_counter_ns() - start) / 1e6))
            active, entries, rows = still, next_entries, next_rows
        return drafts

    def end(self, seq: int) -> None:
        """The answer ended: its cells stay as a cache for the next prompt that shares them (begin)."""
        state = self._seqs.get(seq)
        if state is not None:
            self._seqs[seq] = _Sequence(pending_pos=state.pending_pos, pending=state.pending)

    def close(self) -> None:
        self.head.close()


def build(sources: DraftSources) -> Drafter:
    return MtpDrafter(sources.target)
