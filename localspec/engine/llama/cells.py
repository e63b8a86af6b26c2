"""What each sequence of a model's KV cache holds: its tokens by position, and how many of them were read as a prompt.

llama.cpp keeps the cells; this is their one record on the Python side, kept by the Model at every decode, rollback
and share, so the one-sequence callers (sequence 0), the batch scheduler (a sequence per slot) and the drafters read
the same record instead of each keeping a copy that could drift from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class SequenceCells:
    tokens: list[list[int]]  # per sequence, the token at each position it holds (positions 0..len-1, no gaps)
    # Per sequence, its leading cells read as prompt in canonical passes: what a later prompt may reuse (prompt_passes).
    canonical: list[int]

    @classmethod
    def empty(cls, n_seq: int) -> SequenceCells:
        return cls([[] for _ in range(n_seq)], [0] * n_seq)

    def placed(self, entries: Sequence[tuple[int, int, tuple[int, ...]]]) -> None:
        """A pass decoded these (token, position, sequences): each lands at the end of every sequence it names."""
        for token, pos, seqs in entries:
            for seq in seqs:
                held = self.tokens[seq]
                if pos != len(held):
                    raise AssertionError(f"sequence {seq} holds {len(held)} tokens: a token cannot go to position {pos}")
                held.append(token)

    def cut(self, seq: int, from_pos: int) -> None:
        """Sequence `seq`'s cells from `from_pos` on are gone."""
        del self.tokens[seq][from_pos:]
        self.canonical[seq] = min(self.canonical[seq], from_pos)

    def share(self, source: int, seq: int, n: int) -> None:
        """Sequence `seq` (empty) now holds `source`'s first n cells, read as they were read there."""
        self.tokens[seq][:] = self.tokens[source][:n]  # in place: each sequence keeps one list (Model.kv_tokens is sequence 0's)
        self.canonical[seq] = min(self.canonical[source], n)

    def replace_tail(self, seq: int, split: int, tokens: Sequence[int]) -> None:
        """Sequence `seq` keeps its first `split` cells, then holds `tokens` (a tree's fork taking the main branch's place)."""
        self.tokens[seq][split:] = tokens
        self.canonical[seq] = min(self.canonical[seq], split)
