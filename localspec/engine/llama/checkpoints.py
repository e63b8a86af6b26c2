"""A recurrent state's checkpoints: the state saved where a prompt pass ended, per sequence, so a later prompt that
shares those tokens restores it instead of reading them all again (llama-server's context checkpoints).

Only the recurrent part is saved, with a window cache's cells where the model has one (llama.cpp's PARTIAL_ONLY state): a
full attention cache drops its own cells exactly. Each checkpoint is one copy of a sequence's recurrent state (and its
window's cells); memory.CHECKPOINTS are kept, oldest first.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from localspec.engine.llama.memory import CHECKPOINTS

_FLAGS = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


class Checkpoints:
    def __init__(self, ctx: llama_cpp.llama_context_p, n_seq: int) -> None:
        self._ctx = ctx
        self._kept: list[list[tuple[int, ctypes.Array[ctypes.c_uint8]]]] = [[] for _ in range(n_seq)]  # (position, state)

    def save(self, seq: int, pos: int) -> None:
        """Sequence `seq`'s state now, which follows its first `pos` tokens."""
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq, _FLAGS)
        state = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data_ext(self._ctx, state, size, seq, _FLAGS) == size:
            kept = self._kept[seq]
            kept.append((pos, state))
            del kept[:-CHECKPOINTS]

    def bytes_held(self, seq: int) -> int:
        """What the sequence's checkpoints take in RAM (the memory planner counts memory.CHECKPOINTS of them)."""
        return sum(len(state) for _, state in self._kept[seq])

    def latest(self, seq: int, at: int) -> int:
        """The position of the latest checkpoint at or before `at` (0: none)."""
        return max((pos for pos, _ in self._kept[seq] if pos <= at), default=0)

    def restore(self, seq: int, at: int) -> int:
        """Put back the latest state saved at or before position `at`; its position (0: none, or it would not load)."""
        for pos, state in reversed(self._kept[seq]):
            if pos <= at:
                return pos if llama_cpp.llama_state_seq_set_data_ext(self._ctx, state, len(state), seq, _FLAGS) == len(state) else 0
        return 0

    def drop_after(self, seq: int, pos: int) -> None:
        """The sequence went back to `pos`: its checkpoints past it no longer describe it."""
        kept = self._kept[seq]
        while kept and kept[-1][0] > pos:
            kept.pop()
