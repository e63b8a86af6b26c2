"""A GBNF grammar that llguidance cannot read, on llama.cpp's own grammar sampler (`llama_sampler_init_grammar`), as
llama-server runs it: each row goes through all the vocabulary's candidates by ctypes (14-16 ms a row on a 152k
vocabulary, against tens of microseconds for llguidance's masks), and it finds no forced text to draft."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np

from localspec.engine.errors import EngineError

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class GbnfGrammar:
    """One answer's state of llama.cpp's grammar sampler over a model's vocabulary (engine/grammar.py's Grammar)."""

    def __init__(self, vocab: ctypes.c_void_p, n_vocab: int, gbnf: str) -> None:
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        if not self._sampler:
            raise EngineError("The grammar could not be parsed by llama.cpp (see its log); check the GBNF.")
        self._data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._data["id"] = np.arange(n_vocab, dtype=np.int32)
        self.ns = 0
        self.rows = 0

    def _allowed(self, sampler: ctypes.c_void_p, row: np.ndarray) -> np.ndarray:
        """The row's logits with what `sampler`'s state forbids next at -inf."""
        self._data["logit"] = row
        array = llama_cpp.llama_token_data_array(self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
                                                 len(self._data), -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
        self.rows += 1
        return self._data["logit"].copy()

    def mask(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        start = time.perf_counter_ns()
        masked = np.array(rows, dtype=np.float32, copy=True)
        state = self._sampler
        clones = []
        try:
            for i in range(len(masked)):
                masked[i] = self._allowed(state, masked[i])
                if i == len(draft) or not np.isfinite(masked[i][draft[i]]):
                    break  # the draft ends here, or the grammar forbids its next token: later rows are never used
                state = llama_cpp.llama_sampler_clone(state)
                clones.append(state)
                llama_cpp.llama_sampler_accept(state, draft[i])
        finally:
            for clone in clones:
                llama_cpp.llama_sampler_free(clone)
            self.ns += time.perf_counter_ns() - start
        return masked

    def forced(self, limit: int) -> list[int]:
        return []

    def accept(self, tokens: Sequence[int]) -> None:
        start = time.perf_counter_ns()
        for token in tokens:
            llama_cpp.llama_sampler_accept(self._sampler, token)
        self.ns += time.perf_counter_ns() - start

    def close(self) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        self.close()
