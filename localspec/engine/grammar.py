"""A GBNF grammar (JSON mode, a JSON schema) that constrains what the target may say, speculation included.

The constrained target is the target whose every row has the tokens the grammar forbids there set to -inf. A verify
pass's row i is masked with the grammar as it stands after the draft's first i tokens, so verification judges the
draft against the constrained target exactly as it judges any draft: greedy takes the masked argmax, speculative
sampling's p is the masked softmax, and a draft token the grammar forbids has p = 0 and is always rejected. Rows past
such a token are never used (the draft ends there), so they are left as they are. Only what the verdict emits enters
the grammar's state. The grammar is llama.cpp's own sampler (`llama_sampler_init_grammar`), as llama-server uses it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_grammar

from localspec.engine.errors import EngineError

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def json_grammar(schema: dict | None) -> str:
    """GBNF for any JSON object (schema None, OpenAI's json_object) or for values of a JSON schema."""
    if schema is None:
        return llama_grammar.JSON_GBNF
    import json

    try:
        return llama_grammar.json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises what it meets: KeyError, ValueError, NotImplementedError...
        raise EngineError(f"This JSON schema cannot be turned into a grammar ({type(exc).__name__}: {exc}).") from exc


class Grammar:
    """One answer's grammar state over a model's vocabulary."""

    def __init__(self, vocab: ctypes.c_void_p, n_vocab: int, gbnf: str) -> None:
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        if not self._sampler:
            raise EngineError("The grammar could not be parsed by llama.cpp (see its log); check the GBNF or the JSON schema.")
        self._data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._data["id"] = np.arange(n_vocab, dtype=np.int32)

    def allowed(self, sampler: ctypes.c_void_p, row: np.ndarray) -> np.ndarray:
        """Which tokens `sampler`'s state allows next: the row's logits with the forbidden ones at -inf."""
        self._data["logit"] = row
        array = llama_cpp.llama_token_data_array(self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
                                                 len(self._data), -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
        return self._data["logit"].copy()

    def mask(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """The verify rows as the constrained target has them: row i under the grammar after draft[:i]."""
        masked = np.array(rows, dtype=np.float32, copy=True)
        state = self._sampler
        clones = []
        try:
            for i in range(len(masked)):
                masked[i] = self.allowed(state, masked[i])
                if i == len(draft) or not np.isfinite(masked[i][draft[i]]):
                    break  # the draft ends here, or the grammar forbids its next token: later rows are never used
                state = llama_cpp.llama_sampler_clone(state)
                clones.append(state)
                llama_cpp.llama_sampler_accept(state, draft[i])
        finally:
            for clone in clones:
                llama_cpp.llama_sampler_free(clone)
        return masked

    def accept(self, tokens: Sequence[int]) -> None:
        """What the verdict emitted (each allowed by construction) enters the grammar's state."""
        for token in tokens:
            llama_cpp.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        self.close()
