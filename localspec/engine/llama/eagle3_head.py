"""An EAGLE-3 draft head beside a loaded target: its own small GGUF (`general.architecture = eagle3`), run in a context
that pairs with the target's.

The head reads three of the target's layers: llama.cpp keeps each chosen layer's input for every token the target
reads (llama_set_embeddings_layer_inp, or the final hidden state where the layer is the last). Its encoder fuses the
three rows of a token into one feature row g (`fc`); its decoder block reads, at position p, token p + 1 beside g_p,
and gives logits for the token after, with its own pre-norm state to continue from (common/speculative.cpp's
draft-eagle3). The layer-input calls are exported from libllama with C++ linkage, so they are bound here by their
mangled names (llama-cpp-python binds the nextn ones that way too).
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.engine.errors import EngineError, ModelLoadError
from localspec.engine.llama import llama_log
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.engine.llama.model import Model, ModelConfig
from localspec.engine.pair_check import check_eagle3_head


@functools.cache
def _bound() -> SimpleNamespace:
    """The layer-input calls, bound on first use: a llama.cpp build without them fails the eagle3 drafter alone."""
    lib = llama_cpp.llama_cpp._lib
    signatures = {  # name: (mangled symbol, argument types, result type)
        "set_layer_inp": ("_Z30llama_set_embeddings_layer_inpP13llama_contextjb", [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None),
        "get_layer_inp": ("_Z30llama_get_embeddings_layer_inpP13llama_contextj", [ctypes.c_void_p, ctypes.c_uint32],
                          ctypes.POINTER(ctypes.c_float)),
        "layer_ids": ("_Z28llama_model_target_layer_idsPK11llama_model", [ctypes.c_void_p], ctypes.POINTER(ctypes.c_int32)),
        "layer_ids_n": ("_Z30llama_model_target_layer_ids_nPK11llama_model", [ctypes.c_void_p], ctypes.c_uint32),
    }
    calls = {}
    for name, (symbol, argtypes, restype) in signatures.items():
        try:
            call = getattr(lib, symbol)
        except AttributeError:
            raise EngineError("This llama.cpp build does not export EAGLE-3's layer-input calls, so the eagle3 drafter cannot run "
                              "here: reinstall localspec's llama-cpp-python, or pick another drafter.") from None
        call.argtypes, call.restype = argtypes, restype
        calls[name] = call
    return SimpleNamespace(**calls)


HEAD_UBATCH = 64  # as the MTP head's (mtp_head.py): its compute buffer holds this many tokens' logits


@dataclass(frozen=True)
class Eagle3File:
    """A pair's EAGLE-3 head as the engine was given it: the file, and its GPU layers (None: all where a GPU is)."""

    path: Path
    gpu_layers: int | None = None


class Eagle3Head:
    """The head's weights and context, the target layers it reads, and what each sequence's cells hold (the token at
    each position, -1 where none)."""

    def __init__(self, target: Model, file: Eagle3File) -> None:
        path = file.path
        check_gguf_file(path)
        self.target, self.path = target, path
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = ModelConfig(file.gpu_layers).resolved_gpu_layers()
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load the EAGLE-3 head {path.name}: {'; '.join(llama_log.take_recent_errors()) or 'no reason given'}.")
        self._ctx: int | None = None
        self._target_ctx: int | None = None
        self.decode_ns = 0
        try:
            self.layers = [int(_bound().layer_ids(self._model)[i]) for i in range(_bound().layer_ids_n(self._model))]
            self.n_embd = int(llama_cpp.llama_model_n_embd(self._model))
            self.n_embd_target = int(llama_cpp.llama_model_n_embd(target.handles[0]))
            self._check_fits()
            self.refresh()
        except BaseException:
            self.close()
            raise

    def _check_fits(self) -> None:
        """A head made for another target is refused before it reads a row."""
        check_eagle3_head(self.target.path.name, self.target.n_layer, self.n_embd_target, self.path.name, self.layers,
                          self.metadata_int("eagle3.target_hidden_size"))

    def metadata_int(self, key: str) -> int | None:
        buf = ctypes.create_string_buffer(64)
        return int(buf.value) if llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf)) >= 0 else None

    def refresh(self) -> bool:
        """Pair with the target's current context (a new one after ensure_sequences), its cells empty; whether it did.
        The target's every pass then keeps the three layers' inputs."""
        _, target_ctx = self.target.handles
        if target_ctx == self._target_ctx:
            return False
        self._close_context()
        target = self.target
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = target.n_ctx, target.n_batch, min(HEAD_UBATCH, target.n_batch)
        params.n_seq_max, params.kv_unified = target.n_seq, target.n_seq > 1
        params.n_threads = params.n_threads_batch = target.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        params.ctx_other = target_ctx  # its token embedding and output head, where the file has none of its own
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise ModelLoadError(f"Could not open the EAGLE-3 head's context for {self.path.name} "
                                 f"({'; '.join(llama_log.take_recent_errors()) or 'no reason given'}).")
        for layer in self.layers:
            if layer < target.n_layer:
                _bound().set_layer_inp(target_ctx, layer, True)
            else:
                llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)  # the encoder's g rows, the decoder's pre-norm state
        self._target_ctx = target_ctx
        self._batch = llama_cpp.llama_batch_init(target.n_batch, self.n_embd, target.n_seq)
        self._token_buffer = (llama_cpp.llama_token * target.n_batch)()
        self._batch.token = self._token_buffer
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(target.n_batch, self.n_embd))
        self._encoder = llama_cpp.llama_batch_init(target.n_batch, 3 * self.n_embd_target, 1)
        self._features = np.ctypeslib.as_array(self._encoder.embd, shape=(target.n_batch, 3 * self.n_embd_target))
        self.tokens: list[list[int]] = [[] for _ in range(target.n_seq)]
        return True

    def features(self, indices: Sequence[int]) -> np.ndarray:
        """g for the target's last pass's entries at `indices`: the three layers' inputs of each, fused by the encoder."""
        n_entries = max(indices) + 1
        layers = []
        for layer in self.layers:
            pointer = _bound().get_layer_inp(self._target_ctx, layer) if layer < self.target.n_layer else \
                llama_cpp_ext.llama_get_embeddings_nextn(self._target_ctx)
            layers.append(np.ctypeslib.as_array(pointer, shape=(n_entries, self.n_embd_target))[list(indices)])
        rows = np.empty((len(indices), self.n_embd), dtype=np.float32)
        for start in range(0, len(indices), HEAD_UBATCH):
            piece = slice(start, min(start + HEAD_UBATCH, len(indices)))
            n = piece.stop - piece.start
            self._features[:n] = np.concatenate([layer[piece] for layer in layers], axis=1)
            encoder = self._encoder
            after = llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(self._ctx), 0) + 1  # positions a batch checks
            for i in range(n):
                encoder.pos[i], encoder.n_seq_id[i], encoder.logits[i] = after + i, 1, True
                encoder.seq_id[i][0] = 0
            encoder.n_tokens = n
            self._run(llama_cpp.llama_encode, encoder, n)
            rows[piece] = np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(self._ctx), shape=(n, self.n_embd))
        return rows

    def decode(self, entries: Sequence[tuple[int, int, int, bool]], hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One decoder pass over (token, position, sequence, wants_logits) entries, the i-th beside `hidden[i]` (g, or
        the head's own pre-norm state); each sequence's cells from its first entry on are dropped first. The logits
        and pre-norm rows of the entries that want them (views, valid until the next pass)."""
        n = len(entries)
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
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(outputs, self.target.n_vocab))
        rows = np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(self._ctx), shape=(outputs, self.n_embd))
        return logits, rows

    def _run(self, call: Callable[..., int], batch: llama_cpp.llama_batch, n: int) -> None:
        start = time.perf_counter_ns()
        rc = call(self._ctx, batch)
        if rc == 0:
            llama_cpp.llama_synchronize(self._ctx)
        self.decode_ns += time.perf_counter_ns() - start
        if rc != 0:
            raise EngineError(f"llama.cpp could not run the EAGLE-3 head {self.path.name} over {n} tokens (code {rc}).")

    def forget(self, seq: int, from_pos: int = 0) -> int:
        held = self.tokens[seq] if seq < len(getattr(self, "tokens", [])) else []
        if from_pos < len(held):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), seq, from_pos, -1)
            del held[from_pos:]
        return len(held)

    def _close_context(self) -> None:
        for name in ("_batch", "_encoder"):
            batch = getattr(self, name, None)
            if batch is not None:
                if name == "_batch":
                    batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # ours, not llama.cpp's to free
                llama_cpp.llama_batch_free(batch)
                setattr(self, name, None)
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        self._target_ctx = None

    def close(self) -> None:
        """Free the context, then the weights."""
        self._close_context()
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()
