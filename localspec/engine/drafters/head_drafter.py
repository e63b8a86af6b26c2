"""What the drafters that read the target's own hidden states share (mtp, eagle3): a head that drafts from the rows
the target gives each token, kept in step with every target pass.

A head's cell is made from a token and the row the target gave the token before it: the MTP head places it at the
token's position, EAGLE-3 one position earlier (`offset`). So every token the target reads is queued for the head
(`observe`, each TargetPass) beside the row before it, the first beside the row kept from the pass before (llama.cpp's
pending_h). Once the verdict is known (`accept`), the rejected draft tokens leave the queue and the head's cells, and
the row at the last accepted position is kept. A draft's first pass reads the queue and the target's own new token
beside that row (a head whose logits cannot skip rows reads the queue in a pass of its own); the draft goes on from
the head's own hidden rows, one pass a position for all sequences. llama.cpp reads the target's batch into the head
right after each target pass; read with the first draft pass, it costs one llama_decode a step less, and auto, which
asks the head only where it pays, pays the catch-up only then.

Chained heads (a model with several MTP layers, head i trained for draft position i) draft at most one token a head:
every head reads the queue, and head i re-reads the draft so far under its own attention, as llama.cpp's draft-mtp
chains them.

A head has no recurrent state, so on a hybrid target (Qwen3.5) only the target's own rollback knows its memory kind;
the head drops a tail as an attention cache does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from localspec.engine.drafters.base import Ask, Draft, Drafter, Observation, TargetPass
from localspec.engine.drafters.draft_model import DraftOrder, next_draft_token
from localspec.engine.llama.entry import Entry
from localspec.engine.llama.model import Model
from localspec.engine.llama.vocabulary import Vocabulary
from localspec.engine.tokens import common_prefix


class DraftHead(Protocol):
    """A head's context beside the target (mtp_head.py, eagle3_head.py)."""

    target: Model
    n_embd: int  # the width of the rows it reads
    tokens: list[list[int]]  # each sequence's cells: the token at each position (-1 where none)
    decode_ns: int
    n_heads: int  # trained heads, one per draft position where several

    def refresh(self) -> bool: ...

    def use_head(self, index: int) -> None: ...

    def token_rows(self, n_entries: int, picked: Sequence[int]) -> np.ndarray:
        """The row the target's last pass (of `n_entries` entries) gave each picked entry, as the head reads it (copies)."""
        ...

    def decode(self, entries: Sequence[Entry], hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def forget(self, seq: int, from_pos: int = 0) -> int: ...

    def close(self) -> None: ...


@dataclass
class _Sequence:
    last: int | None = None  # the target's newest token, which its next pass reads (None: its prompt is being read)
    first_pos: int = 0  # the position of the first row in `rows`
    rows: np.ndarray | None = None  # the rows of the last target pass that read this sequence (copies)
    pending_pos: int = -1  # the position whose row comes before the next token (-1: none kept)
    pending: np.ndarray | None = None
    unread: list[tuple[int, int]] = field(default_factory=list)  # (token, cell position) the head has yet to read
    unread_rows: list[np.ndarray] = field(default_factory=list)  # the row beside each


class HeadDrafter(Drafter):
    """Drafts with a head that reads the target's rows, for every sequence asking at once."""

    offset = 0  # where a token's cell sits, relative to the token's position
    mixes_outputs = True  # a pass may ask some rows and not others (else the queue is read in a pass of its own)

    def __init__(self, head: DraftHead) -> None:
        self.head = head
        self.models = (head,)
        self._seqs: dict[int, _Sequence] = {}
        self.passes: list[tuple[int, float]] = []  # the last draft's passes, (tokens, ms), as ModelDrafter's
        self.chained_heads = head.n_heads if head.n_heads > 1 else None

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        """The head keeps the cells it shares with the prompt; the row kept from before still pairs with the next token
        where its position lies within them."""
        if self.head.refresh():
            self._seqs.clear()
        keep = self.head.forget(seq, common_prefix(self.head.tokens[seq], prompt[-self.offset :]))
        state = self._seqs.get(seq, _Sequence())
        valid = state.pending_pos < keep - self.offset
        self._seqs[seq] = _Sequence(pending_pos=state.pending_pos, pending=state.pending) if valid else _Sequence()

    def observe(self, seen: Observation) -> None:
        if isinstance(seen, TargetPass):
            self._queue(seen.entries)

    def _queue(self, entries: Sequence[Entry]) -> None:
        """Queue the target's pass for the head (read with the next draft, or here once the queue is long), each token
        beside the row before it; keep each sequence's rows for its verdict (a prompt's: its last)."""
        picked = [i for i, (_, _, seq, _) in enumerate(entries) if seq in self._seqs]
        if not picked:
            return
        if self.head.refresh():  # the target reopened its context: every sequence starts over
            for seq in self._seqs:
                self._seqs[seq] = _Sequence(last=self._seqs[seq].last)
        rows = self.head.token_rows(len(entries), picked)
        previous: dict[int, int] = {}  # each sequence's previous entry in the pass, by its index in `picked`
        by_seq: dict[int, list[int]] = {}
        for j, i in enumerate(picked):
            token, pos, seq, _ = entries[i]
            state = self._seqs[seq]
            if seq in previous:
                row = rows[previous[seq]]
            elif state.pending is not None and state.pending_pos == pos - 1:
                row = state.pending
            else:
                row = np.zeros(self.head.n_embd, dtype=np.float32)
            if pos + self.offset >= 0:
                state.unread.append((token, pos + self.offset))
                state.unread_rows.append(row)
            previous[seq] = j
            by_seq.setdefault(seq, []).append(j)
        for seq, indices in by_seq.items():
            state = self._seqs[seq]
            kept = indices if state.last is not None else indices[-1:]  # a prompt's tokens are all accepted text
            state.first_pos = entries[picked[kept[0]]][1]
            state.rows = rows[kept]
            if state.last is None:  # the prompt's next pass, or its first token's draft, pairs with its last row
                state.pending_pos, state.pending = state.first_pos, state.rows[0]
        if sum(len(state.unread) for state in self._seqs.values()) > self.head.target.n_batch // 2:
            self._read_unread(list(self._seqs))

    def _read_unread(self, seqs: Sequence[int]) -> list[tuple[int, float]]:
        """The head reads what the sequences have queued, asking no rows: a queue kept short (its rows are copies). Chained
        heads each read it, the first head last (the one a draft starts with). Its passes, (tokens, ms)."""
        pieces: list[tuple[list[Entry], list[np.ndarray]]] = [([], [])]
        for seq in seqs:
            state = self._seqs[seq]
            if len(pieces[-1][0]) + len(state.unread) > self.head.target.n_batch and pieces[-1][0]:
                pieces.append(([], []))
            pieces[-1][0].extend(Entry(token, pos, seq, False) for token, pos in state.unread)
            pieces[-1][1].extend(state.unread_rows)
            state.unread, state.unread_rows = [], []
        passes = []
        for entries, rows in pieces:
            for index in reversed(range(self.head.n_heads)) if entries else ():
                start = time.perf_counter_ns()
                self.head.use_head(index)
                self.head.decode(entries, np.stack(rows))
                passes.append((len(entries), (time.perf_counter_ns() - start) / 1e6))
        return passes

    def pending_tokens(self, seq: int) -> int:
        """Tokens the target read that the head has not: what its next draft's first pass reads first."""
        state = self._seqs.get(seq)
        return len(state.unread) if state is not None else 0

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
        kept = sum(1 for _, pos in state.unread if pos <= state.pending_pos + self.offset)  # the rejected draft tokens go
        del state.unread[kept:], state.unread_rows[kept:]
        self.head.forget(seq, state.pending_pos + 1 + self.offset)

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return self.draft([DraftOrder.of(ask) for ask in asks])

    def draft(self, orders: Sequence[DraftOrder]) -> list[Draft]:
        """A draft per order (no lookup tokens before it: the head would need the target's rows for them), one head
        pass a position: the first reads each sequence's queue (where the head mixes outputs), then its own token;
        chained heads re-read the whole draft so far, each under its own head."""
        self.passes = []
        drafts = [Draft() for _ in orders]
        active = [index for index, order in enumerate(orders)
                  if order.k > 0 and (state := self._seqs.get(order.seq)) is not None and state.last is not None]
        queued = sum(self.pending_tokens(orders[i].seq) for i in active)
        chained = self.chained_heads is not None
        if queued and (not self.mixes_outputs or chained or queued + len(active) > self.head.target.n_batch):
            self.passes += self._read_unread([orders[i].seq for i in active])  # the catch-up, priced as draft passes
        queued_links: dict[int, list[tuple[int, int, np.ndarray]]] = {}  # what each sequence queued, read in the first pass
        links: dict[int, list[tuple[int, int, np.ndarray]]] = {}  # each draft's (token, position, row beside it) so far
        for index in active:
            state = self._seqs[orders[index].seq]
            assert not orders[index].after, "the head drafts from the accepted text only"
            queued_links[index] = [(token, pos, row) for (token, pos), row in zip(state.unread, state.unread_rows)]
            state.unread, state.unread_rows = [], []
            pending = state.pending if state.pending is not None else np.zeros(self.head.n_embd, dtype=np.float32)
            links[index] = [(state.last, state.pending_pos + 1 + self.offset, pending)]  # type: ignore[list-item]
        depth = 0
        while active:
            entries: list[Entry] = []
            rows: list[np.ndarray] = []
            for index in active:
                read = [*queued_links.pop(index, []), *(links[index] if chained else links[index][-1:])]
                entries += [Entry(token, pos, orders[index].seq, i == len(read) - 1) for i, (token, pos, _) in enumerate(read)]
                rows += [row for *_, row in read]
            start, n_entries = time.perf_counter_ns(), len(entries)
            self.head.use_head(depth)
            logits, hidden = self.head.decode(entries, np.stack(rows))
            asking = [entry for entry in entries if entry[3]]
            still: list[int] = []
            for j, index in enumerate(active):
                order, draft = orders[index], drafts[index]
                chosen = next_draft_token(logits[j], order.p_min, order.sampling, order.draws, order.position + len(draft.tokens))
                if chosen is not None:
                    draft.append(*chosen)
                if chosen is not None and len(draft.tokens) < min(order.k, self.chained_heads or order.k):
                    still.append(index)
                    links[index].append((chosen[0], asking[j][1] + 1, hidden[j].copy()))
            self.passes.append((n_entries, (time.perf_counter_ns() - start) / 1e6))
            active, depth = still, depth + 1
        self.head.use_head(0)
        return drafts

    def end(self, seq: int) -> None:
        """The answer ended: the head reads what it queued, and its cells stay as a cache for the next prompt that
        shares them (begin)."""
        state = self._seqs.get(seq)
        if state is not None:
            self._read_unread([seq])
            self._seqs[seq] = _Sequence(pending_pos=state.pending_pos, pending=state.pending)

    def close(self) -> None:
        self.head.close()

    def timing_view(self) -> HeadTiming:
        """The head as auto's calibration times a draft model (before any sequence uses it)."""
        return HeadTiming(self.head)


@dataclass
class HeadTiming:
    """The head decoding plain tokens from position 0 of sequence 0, each beside a zero row: what its passes cost."""

    head: DraftHead

    @property
    def n_batch(self) -> int:
        return self.head.target.n_batch

    @property
    def vocab(self) -> Vocabulary:
        return self.head.target.vocab

    def forget(self, seq: int, from_pos: int = 0) -> int:
        return self.head.forget(seq, from_pos)

    def decode(self, tokens: Sequence[int], outputs: int) -> np.ndarray:
        first_output = len(tokens) - outputs
        entries = [Entry(token, pos, 0, pos >= first_output) for pos, token in enumerate(tokens)]
        return self.head.decode(entries, np.zeros((len(tokens), self.head.n_embd), dtype=np.float32))[0]
