"""What each sequence of one context may drop, reuse and lend: memory.py's rules applied to the context's own state
(the tokens each sequence's last pass put in, its oldest cell, its checkpoints). Model asks here before it drops or
lends cells, so every rollback and every prompt reuse follows the one rule of its memory kind.
"""

from __future__ import annotations

import llama_cpp

from localspec.engine import prompt_passes
from localspec.engine.llama.checkpoints import Checkpoints
from localspec.engine.llama.memory import MemoryKind, checkpoints_kept, droppable, window_holds


class SequenceMemory:
    def __init__(self, ctx: llama_cpp.llama_context_p, kind: MemoryKind, snapshots: int, n_swa: int, n_seq: int) -> None:
        self.kind, self.snapshots, self.n_swa = kind, snapshots, n_swa
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.last_pass = [0] * n_seq  # per sequence, the tokens its last pass put in (0 once rolled back)
        self._checkpoints = Checkpoints(ctx, n_seq) if checkpoints_kept(kind) else None

    def drop_point(self, seq: int, from_pos: int, held: int) -> int:
        """Where a sequence holding `held` tokens, asked to drop them from `from_pos` on, can go back to: `from_pos`
        itself, the latest checkpoint before it (restored here), or 0 (everything goes)."""
        if from_pos <= 0 or not self.window_holds(seq, from_pos):
            return 0
        can_drop = droppable(self.kind, self.snapshots, self.last_pass[seq])
        if can_drop is not None and held - from_pos > can_drop:
            return self._checkpoints.restore(seq, from_pos) if self._checkpoints else 0
        return from_pos

    def dropped(self, seq: int, pos: int) -> None:
        """The sequence now ends at `pos`: a recurrent rollback spent its pass's snapshots, and later checkpoints went."""
        self.last_pass[seq] = 0
        if self._checkpoints:
            self._checkpoints.drop_after(seq, pos)

    def read(self, seq: int, n: int) -> None:
        """The sequence's first `n` tokens, all it holds, were read as prompt in canonical passes: a checkpoint there."""
        if self._checkpoints:
            self._checkpoints.save(seq, n)

    def checkpoint_bytes(self, seq: int) -> int:
        return self._checkpoints.bytes_held(seq) if self._checkpoints else 0

    def reusable_prefix(self, seq: int, shared: int, canonical: int, n_prompt: int) -> int:
        """How many of the `shared` leading tokens the sequence holds a prompt of `n_prompt` tokens keeps: on an
        attention cache, prompt_passes's rule over its `canonical` cells (its rows then come out as a fresh read's); on
        a recurrent state, the latest checkpoint among them. A recurrent state is one sum over every token before it,
        so the rest read from a checkpoint can round otherwise than a fresh read, as a verify pass can: near-ties only."""
        if self._checkpoints is None:
            return prompt_passes.reusable_prefix(shared, canonical, n_prompt)
        return self._checkpoints.latest(seq, min(shared, n_prompt - 1))

    def lendable(self, source: int, n: int) -> int:
        """How many of sequence `source`'s first `n` tokens another sequence can take: a recurrent state is the last
        token's alone, so it cannot be lent by position."""
        return n if self.kind is MemoryKind.ATTENTION and self.window_holds(source, n) else 0

    def window_holds(self, seq: int, keep: int) -> bool:
        """memory.window_holds for this sequence, asked of llama.cpp only where the model has a window. A hybrid's oldest
        position is its recurrent state's, the newest: its drops are bounded by the snapshots instead, which a window
        of the last pass's tokens always covers."""
        if self.n_swa <= 0 or self.kind is not MemoryKind.ATTENTION:
            return True
        return window_holds(self.n_swa, self.oldest_cell(seq), keep)

    def oldest_cell(self, seq: int) -> int:
        """The oldest position the sequence still holds in the cache (-1: none); past a window, older ones went."""
        return llama_cpp.llama_memory_seq_pos_min(self._memory, seq)
