"""The target's MTP layers as a draft head: a context of llama.cpp's MTP type over the target's own weights.

A Qwen3.5/3.6 (or GLM-4.5, MiMo, DeepSeek) GGUF can carry multi-token-prediction layers (`nextn_predict_layers`): a
block that reads a token's embedding beside the target's hidden state at the position before it, and predicts the
token after. llama.cpp runs it in a context of its own (LLAMA_CONTEXT_TYPE_MTP, `ctx_other` the target's), whose cache
holds that block's attention: one cell per position, each made from a token and the hidden row before it. Each pass
here takes such entries, the token in the batch's token array and the row in its embedding array (both set, as
common/speculative.cpp's draft-mtp does), and gives the head's logits and its own hidden rows.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.engine.errors import EngineError, ModelLoadError
from localspec.engine.llama import llama_log
from localspec.engine.llama.model import Model

# The head's passes read at most this many tokens at a time: llama.cpp reserves its compute buffer for a full ubatch of
# logits, which at the target's 512 would cost a Qwen3.6's 248k-row vocabulary half a GB; drafts are a token per
# sequence, and a queued prompt is read in pieces.
HEAD_UBATCH = 64


def mtp_layers(target: Model) -> int:
    """How many MTP layers llama.cpp loaded with the target (0: none in the file, or loaded without load_mtp)."""
    model, _ = target.handles
    return int(llama_cpp.llama_model_n_layer_nextn(model))


class MtpHead:
    """The head's context beside a loaded target, with what each sequence's cells hold (the token at each position; -1
    where the head never read the target's row, as after a prompt cache another drafter filled)."""

    def __init__(self, target: Model) -> None:
        if mtp_layers(target) < 1:
            raise EngineError(f"{target.path.name} carries no MTP layers (its header has no nextn_predict_layers), so the mtp "
                              "drafter cannot run on it: pick a target whose GGUF keeps them (an -MTP file), or another drafter.")
        self.target = target
        model, _ = target.handles
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model))
        self.decode_ns = 0  # time inside llama_decode, as Model's: the scheduler counts it as llama time
        self._target_ctx: llama_cpp.llama_context_p | None = None
        self._ctx: llama_cpp.llama_context_p | None = None
        self.tokens: list[list[int]] = []
        self.refresh()

    def refresh(self) -> bool:
        """Pair with the target's current context, opening the head's anew (its cells empty) where the target reopened
        its own (ensure_sequences); whether it did. The target's every pass then keeps a hidden row per token."""
        model, target_ctx = self.target.handles
        if target_ctx == self._target_ctx:
            return False
        self.close()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = self.target.n_ctx, self.target.n_batch, min(HEAD_UBATCH, self.target.n_batch)
        params.n_seq_max, params.kv_unified = self.target.n_seq, self.target.n_seq > 1
        params.n_threads = params.n_threads_batch = self.target.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        params.n_rs_seq = 0  # the head's block attends: no recurrent state to snapshot
        params.ctx_type, params.ctx_other = llama_cpp.LLAMA_CONTEXT_TYPE_MTP, target_ctx
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            errors = "; ".join(llama_log.take_recent_errors()) or "no reason given"
            raise ModelLoadError(f"Could not open the MTP head's context for {self.target.path.name} ({errors}). This is "
                                 "usually a lack of memory: try a smaller context size.")
        llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)  # a row for every token the target reads
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)  # the head's own: only for the rows asked
        self._target_ctx = target_ctx
        self._batch = llama_cpp.llama_batch_init(self.target.n_batch, self.n_embd, self.target.n_seq)
        self._token_buffer = (llama_cpp.llama_token * self.target.n_batch)()
        self._batch.token = self._token_buffer  # the batch holds embeddings; the head reads the tokens beside them
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.target.n_batch, self.n_embd))
        self.tokens = [[] for _ in range(self.target.n_seq)]
        return True

    def target_rows(self, n: int) -> np.ndarray:
        """The target's hidden rows of its last pass, one per entry in entry order: a view valid until its next pass."""
        pointer = llama_cpp_ext.llama_get_embeddings_nextn(self._target_ctx)
        return np.ctypeslib.as_array(pointer, shape=(n, self.n_embd))

    def decode(self, entries: Sequence[tuple[int, int, int, bool]], hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One pass over (token, position, sequence, wants_logits) entries, the i-th paired with `hidden[i]`, the hidden
        row before its token. Each sequence's cells from its first entry on are dropped first, so a pass replaces the
        speculation the last one left. The logits and the head's hidden rows of the entries that want them (views,
        valid until the next pass)."""
        n = len(entries)
        if n > self.target.n_batch:
            raise ValueError(f"batch of {n} tokens exceeds n_batch={self.target.n_batch}")
        firsts: dict[int, int] = {}
        for _, pos, seq, _ in entries:
            firsts.setdefault(seq, pos)
        for seq, pos in firsts.items():
            self.forget(seq, pos)
        batch = self._batch
        for i, (token, pos, seq, wants) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, wants
            batch.seq_id[i][0] = seq
            held = self.tokens[seq]
            held.extend([-1] * (pos - len(held)))
            held.append(token)
        self._embd[:n] = hidden
        batch.n_tokens = n
        start = time.perf_counter_ns()
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc == 0:
            llama_cpp.llama_synchronize(self._ctx)
        self.decode_ns += time.perf_counter_ns() - start
        if rc != 0:
            raise EngineError(f"llama.cpp could not run the MTP head of {self.target.path.name} over {n} tokens (code {rc}).")
        outputs = sum(1 for *_, wants in entries if wants)
        if not outputs:
            return np.empty((0, self.target.n_vocab), dtype=np.float32), np.empty((0, self.n_embd), dtype=np.float32)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(outputs, self.target.n_vocab))
        rows = np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(self._ctx), shape=(outputs, self.n_embd))
        return logits, rows

    def forget(self, seq: int, from_pos: int = 0) -> int:
        """Drop sequence `seq`'s cells from `from_pos` on (an attention cache drops any tail); how many positions it holds."""
        held = self.tokens[seq] if seq < len(self.tokens) else []
        if from_pos < len(held):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), seq, from_pos, -1)
            del held[from_pos:]
        return len(held)

    def close(self) -> None:
        """Free the head's context (before the target's weights go: it runs on them)."""
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # the token buffer is ours, not llama.cpp's to free
            llama_cpp.llama_batch_free(batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        self._target_ctx = None

    def __del__(self) -> None:
        self.close()
