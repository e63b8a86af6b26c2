"""A draft head's llama.cpp context beside a loaded target (mtp_head.py, eagle3_head.py): what both kinds share.

A head's pass takes entries that carry a token and a row of floats each, the token in the batch's token array and the
row in its embedding array (both set, as common/speculative.cpp's draft-mtp and draft-eagle3 do), and gives the
head's logits and its own hidden rows. Each sequence's cells are recorded by position, so a pass can replace the
speculation the last one left and a new prompt can keep what it shares.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.engine.errors import EngineError, ModelLoadError
from localspec.engine.llama import llama_log
from localspec.engine.llama.entry import Entry
from localspec.engine.llama.model import Model

# A head's passes read at most this many tokens at a time: llama.cpp reserves its compute buffer for a full ubatch of
# logits, which at the target's 512 would cost a Qwen3.6's 248k-row vocabulary half a GB; drafts are a token per
# sequence, and a queued prompt is read in pieces.
HEAD_UBATCH = 64


class HeadContext:
    """The context, its batch of (token, row) entries, and what each sequence's cells hold (the token at each position;
    -1 where none, as after a prompt cache another drafter filled)."""

    name = "draft head"  # what its errors call it
    n_heads = 1  # its trained heads, one per draft position where several (one drafts every position)

    def __init__(self, target: Model, n_embd: int) -> None:
        self.target = target
        self.n_embd = n_embd  # the width of the rows beside its tokens
        self.decode_ns = 0  # time inside llama.cpp, as Model's: the scheduler counts it as llama time
        self._ctx: int | None = None
        self._target_ctx: int | None = None
        self._target_serial: int | None = None  # the target context's Model.context_serial it pairs with
        self.tokens: list[list[int]] = []

    def _open(self, model: int, target_ctx: int, adjust: Callable[[llama_cpp.llama_context_params], None]) -> None:
        """A fresh context on `model`, sized as the target's (its ubatch HEAD_UBATCH), with `adjust`'s settings."""
        target = self.target
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = target.n_ctx, target.n_batch, min(HEAD_UBATCH, target.n_batch)
        params.n_seq_max, params.kv_unified = target.n_seq, target.n_seq > 1
        params.n_threads = params.n_threads_batch = target.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        params.ctx_other = target_ctx
        adjust(params)
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            errors = "; ".join(llama_log.take_recent_errors()) or "no reason given"
            raise ModelLoadError(f"Could not open the {self.name}'s context for {target.path.name} ({errors}). This is usually a "
                                 "lack of memory: try a smaller context size.")
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)  # its own hidden rows, for the rows asked
        self._target_ctx, self._target_serial = target_ctx, self.target.context_serial
        self._batch = llama_cpp.llama_batch_init(target.n_batch, self.n_embd, target.n_seq)
        self._token_buffer = (llama_cpp.llama_token * target.n_batch)()
        self._batch.token = self._token_buffer  # the batch holds rows; the head reads the tokens beside them
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(target.n_batch, self.n_embd))
        self.tokens = [[] for _ in range(target.n_seq)]

    def paired(self) -> bool:
        """Whether it pairs with the target's current context (by its serial: a reopened context may reuse the address)."""
        return self._target_ctx is not None and self._target_serial == self.target.context_serial

    def decode(self, entries: Sequence[Entry], hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One pass over (token, position, sequence, wants_logits) entries, the i-th beside `hidden[i]`. Each sequence's
        cells from its first entry on are dropped first, so a pass replaces the speculation the last one left. The
        logits and the head's hidden rows of the entries that want them (views, valid until the next pass)."""
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
        self._run(llama_cpp.llama_decode, batch, n)
        outputs = sum(1 for *_, wants in entries if wants)
        if not outputs:
            return np.empty((0, self.target.n_vocab), dtype=np.float32), np.empty((0, self.n_embd), dtype=np.float32)
        return self.logits(outputs), self.own_rows(outputs)

    def use_head(self, index: int) -> None:
        """The head the next passes run (chained heads: one per draft position); a lone head has nothing to choose."""

    def logits(self, rows: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(rows, self.target.n_vocab))

    def own_rows(self, rows: int) -> np.ndarray:
        """The head's own hidden rows of its last pass (an EAGLE-3 encoder's: its fused features)."""
        return np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(self._ctx), shape=(rows, self.n_embd))

    def _run(self, call: Callable[..., int], batch: llama_cpp.llama_batch, n: int) -> None:
        start = time.perf_counter_ns()
        rc = call(self._ctx, batch)
        if rc == 0:  # CUDA, Metal and RPC return before the pass is done
            llama_cpp.llama_synchronize(self._ctx)
        self.decode_ns += time.perf_counter_ns() - start
        if rc != 0:
            raise EngineError(f"llama.cpp could not run the {self.name} of {self.target.path.name} over {n} tokens (code {rc}).")

    def forget(self, seq: int, from_pos: int = 0) -> int:
        """Drop sequence `seq`'s cells from `from_pos` on (an attention cache drops any tail); how many positions it holds."""
        held = self.tokens[seq] if seq < len(self.tokens) else []
        if from_pos < len(held):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), seq, from_pos, -1)
            del held[from_pos:]
        return len(held)

    def close(self) -> None:
        """Free the context (before the target's weights go: a head runs on them)."""
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # the token buffer is ours, not llama.cpp's to free
            llama_cpp.llama_batch_free(batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        self._target_ctx = self._target_serial = None

    def __del__(self) -> None:
        self.close()
