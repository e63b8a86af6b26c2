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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.engine.errors import EngineError, ModelLoadError
from localspec.engine.llama import llama_log
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.engine.llama.head_context import HEAD_UBATCH, HeadContext
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


@dataclass(frozen=True)
class Eagle3File:
    """A pair's EAGLE-3 head as the engine was given it: the file, and its GPU layers (None: all where a GPU is)."""

    path: Path
    gpu_layers: int | None = None


class Eagle3Head(HeadContext):
    """The head's weights and context beside a loaded target, and the target layers it reads."""

    name = "EAGLE-3 head"

    def __init__(self, target: Model, file: Eagle3File) -> None:
        check_gguf_file(file.path)
        self.path = file.path
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = ModelConfig(file.gpu_layers).resolved_gpu_layers()
        self._model = llama_cpp.llama_model_load_from_file(str(file.path).encode(), params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load the EAGLE-3 head {file.path.name} "
                                 f"({'; '.join(llama_log.take_recent_errors()) or 'no reason given'}).")
        try:
            super().__init__(target, int(llama_cpp.llama_model_n_embd(self._model)))
            self.layers = [int(_bound().layer_ids(self._model)[i]) for i in range(_bound().layer_ids_n(self._model))]
            self.n_embd_target = int(llama_cpp.llama_model_n_embd(target.handles[0]))
            check_eagle3_head(target.path.name, target.n_layer, self.n_embd_target, file.path.name, self.layers,
                              self._metadata_int("eagle3.target_hidden_size"))  # before it reads a row
            self.refresh()
        except BaseException:
            self.close()
            raise

    def _metadata_int(self, key: str) -> int | None:
        buf = ctypes.create_string_buffer(64)
        return int(buf.value) if llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf)) >= 0 else None

    def refresh(self) -> bool:
        """Pair with the target's current context (a new one after ensure_sequences), its cells empty; whether it did.
        The target's every pass then keeps the three layers' inputs. The head's `ctx_other` lends it the target's
        embedding and output head, where its file has none of its own."""
        _, target_ctx = self.target.handles
        if self.paired():
            return False
        self._close_context()
        self._open(self._model, target_ctx, lambda params: None)
        for layer in self.layers:
            if layer < self.target.n_layer:
                _bound().set_layer_inp(target_ctx, layer, True)
            else:
                llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)
        self._encoder = llama_cpp.llama_batch_init(self.target.n_batch, 3 * self.n_embd_target, 1)
        self._features = np.ctypeslib.as_array(self._encoder.embd, shape=(self.target.n_batch, 3 * self.n_embd_target))
        return True

    def token_rows(self, n_entries: int, indices: Sequence[int]) -> np.ndarray:
        """g for the target's last pass's entries at `indices`: the three layers' inputs of each, fused by the encoder."""
        n_entries = max(indices) + 1
        layers = []
        for layer in self.layers:
            pointer = _bound().get_layer_inp(self._target_ctx, layer) if layer < self.target.n_layer else \
                llama_cpp_ext.llama_get_embeddings_nextn(self._target_ctx)
            layers.append(np.ctypeslib.as_array(pointer, shape=(n_entries, self.n_embd_target))[list(indices)])
        rows = np.empty((len(indices), self.n_embd), dtype=np.float32)
        encoder = self._encoder
        for start in range(0, len(indices), HEAD_UBATCH):
            piece = slice(start, min(start + HEAD_UBATCH, len(indices)))
            n = piece.stop - piece.start
            self._features[:n] = np.concatenate([layer[piece] for layer in layers], axis=1)
            after = llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(self._ctx), 0) + 1  # positions a batch checks
            for i in range(n):
                encoder.pos[i], encoder.n_seq_id[i], encoder.logits[i] = after + i, 1, True
                encoder.seq_id[i][0] = 0
            encoder.n_tokens = n
            self._run(llama_cpp.llama_encode, encoder, n)
            rows[piece] = self.own_rows(n)
        return rows

    def _close_context(self) -> None:
        encoder = getattr(self, "_encoder", None)
        if encoder is not None:
            llama_cpp.llama_batch_free(encoder)
            self._encoder = None
        super().close()

    def close(self) -> None:
        """Free the context, then the weights."""
        self._close_context()
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None
