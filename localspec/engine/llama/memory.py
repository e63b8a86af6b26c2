"""What a model's cache can drop: the one rule every rollback asks (Model.forget), by the kind of memory it holds.

An attention cache holds a cell per token, and any of a sequence's newest cells drop exactly. A recurrent state
(Mamba-like layers, the gated delta nets of Qwen3.5/3.6, Nemotron-H, LFM2) holds no past: it rolls back only where
llama.cpp kept per-token snapshots (`n_rs_seq`, for the architectures it supports), and only over the last pass's
tokens, once (the pass writes a snapshot per token; a rollback restores one and spends them). A hybrid model's cache
is both, and follows the stricter. A sliding-window cache (Gemma, GPT-OSS) keeps only the window's cells in its
window layers (llama.cpp's small cache, swa_full off): its newest cells drop exactly, but a prefix far behind the
newest token may have lost the cells its next token must see. Where a sequence cannot drop what was asked, it goes
back to the latest checkpoint before that point (a recurrent state saved where a prompt pass ended, as llama-server's
context checkpoints are), or else drops everything: the caller then reads the rest again, slower but never wrong.
"""

from __future__ import annotations

from enum import Enum

# Per-token snapshots of the recurrent state a context keeps per sequence (llama.cpp's n_rs_seq): the longest draft a
# recurrent target can verify. Each costs one copy of a sequence's recurrent state; 8 is over twice llama.cpp's default
# K (3), and a larger K is capped here, as every front door says at load (Engine.drafting_note).
RECURRENT_SNAPSHOTS = 8
# Recurrent states kept per sequence at prompt-pass ends: the last prompt's end, which a chat's next turn or an editor's
# next request starts from, and the two before it. Each is one copy of the sequence's recurrent state.
CHECKPOINTS = 3


class MemoryKind(Enum):
    ATTENTION = "attention"  # drops any newest cells exactly
    SNAPSHOTS = "recurrent, with snapshots"  # drops up to its snapshots of the last pass's tokens, once per pass
    RECURRENT = "recurrent"  # cannot drop newest tokens: only the whole sequence

    @property
    def reason(self) -> str:
        """Why a model of this kind drafts less than asked, or not at all (what check, doctor, the app and /props say)."""
        if self is MemoryKind.SNAPSHOTS:
            return f"its recurrent state rolls back at most {RECURRENT_SNAPSHOTS} tokens, so each draft is capped there"
        if self is MemoryKind.RECURRENT:
            return ("its recurrent state cannot roll back rejected tokens in this llama.cpp (no snapshots for this "
                    "architecture), so it answers with plain decoding")
        return ""


def droppable(kind: MemoryKind, snapshots: int, last_pass: int) -> int | None:
    """How many of a sequence's newest tokens can go now (None: any), given its last pass put in `last_pass` of them and
    no rollback has followed it. A pass of n tokens keeps snapshots of the states after each, so n-1 can go."""
    if kind is MemoryKind.ATTENTION:
        return None
    return max(0, min(snapshots, last_pass - 1))


def checkpoints_kept(kind: MemoryKind) -> bool:
    """Whether prompt-pass ends keep a checkpoint: a recurrent state's, which cannot drop tokens otherwise. A hybrid with
    a window (LFM2) saves its window's cells with it (llama.cpp's partial state holds the window cache and the
    recurrent state), so a restore brings back every cell its next token sees."""
    return kind is not MemoryKind.ATTENTION


def window_holds(n_swa: int, pos_min: int, keep: int) -> bool:
    """Whether a sequence cut to its first `keep` tokens still holds every cell the window layers' next token sees: the
    cache's oldest cell for it (`pos_min`, -1 when empty) no later than `keep - n_swa` (llama-server's rule)."""
    return n_swa <= 0 or pos_min <= max(0, keep - n_swa)


def draft_limit(kind: MemoryKind, snapshots: int) -> int | None:
    """The most draft tokens one verify pass may hold on this memory (None: no limit): rejected ones must drop."""
    if kind is MemoryKind.ATTENTION:
        return None
    return snapshots
