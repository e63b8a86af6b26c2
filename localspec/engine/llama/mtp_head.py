"""The target's MTP layers as a draft head: a context of llama.cpp's MTP type over the target's own weights.

A Qwen3.5/3.6 (or GLM-4.5, MiMo, DeepSeek) GGUF can carry multi-token-prediction layers (`nextn_predict_layers`): a
block that reads a token's embedding beside the target's hidden state at the position before it, and predicts the
token after. llama.cpp runs it in a context of its own (LLAMA_CONTEXT_TYPE_MTP), whose cache holds that block's
attention: one cell per position, each made from a token and the target's row before it (head_context.py).

A model with several MTP layers (MiMo-V2, Step-3.5) trained layer i to draft position i: chained heads, as llama.cpp's
draft-mtp runs them. Each layer keeps its own attention in the same cells: a pass under layer i writes only its own
keys and values, and the cells a pass frees and fills again at the same positions keep the other layers' (llama.cpp's
`chain_heads`).
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.engine.errors import DrafterChoiceError
from localspec.engine.llama.head_context import HeadContext
from localspec.engine.llama.model import Model


def mtp_layers(target: Model) -> int:
    """How many MTP layers llama.cpp loaded with the target (0: none in the file, or loaded without load_mtp)."""
    model, _ = target.handles
    return int(llama_cpp.llama_model_n_layer_nextn(model))


class MtpHead(HeadContext):
    """The MTP head's context beside a loaded target."""

    name = "MTP head"

    def __init__(self, target: Model) -> None:
        if mtp_layers(target) < 1:
            raise DrafterChoiceError(f"{target.path.name} carries no MTP layers (its header has no nextn_predict_layers), so the mtp "
                              "drafter cannot run on it: pick a target whose GGUF keeps them (an -MTP file), or another drafter.")
        super().__init__(target, int(llama_cpp.llama_model_n_embd_out(target.handles[0])))
        self.n_heads = mtp_layers(target)
        self.refresh()

    def refresh(self) -> bool:
        """Pair with the target's current context, opening the head's anew (its cells empty) where the target reopened
        its own (ensure_sequences); whether it did. The target's every pass then keeps a hidden row per token."""
        model, target_ctx = self.target.handles
        if self.paired():
            return False
        self.close()

        def mtp(params: llama_cpp.llama_context_params) -> None:
            params.n_rs_seq = 0  # the head's block attends: no recurrent state to snapshot
            params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP

        self._open(model, target_ctx, mtp)
        llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)  # a row for every token the target reads
        return True

    def use_head(self, index: int) -> None:
        if self.n_heads > 1:
            llama_cpp_ext.llama_set_nextn_layer_offset(self._ctx, index)

    def token_rows(self, n_entries: int, picked: Sequence[int]) -> np.ndarray:
        """The target's hidden rows of its last pass (of `n_entries` entries) at the `picked` entries (copies)."""
        pointer = llama_cpp_ext.llama_get_embeddings_nextn(self._target_ctx)
        return np.ctypeslib.as_array(pointer, shape=(n_entries, self.n_embd))[list(picked)]
