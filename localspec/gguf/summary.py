"""What a GGUF header says about a model, in the words a user compares pairs by.

Architecture, parameter count, quantization, trained context length and
vocabulary: enough to see at a glance that a draft belongs to its target, read
from the header alone (local, or a few megabytes over HTTP).
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.pair_check import vocab_name
from localspec.gguf.header import GGUFHeader

# llama.h's enum llama_ftype: general.file_type -> the name users know
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS",
    21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}


@dataclass(frozen=True)
class ModelSummary:
    architecture: str
    n_params: int
    quantization: str
    context_length: int | None
    vocab_type: str
    n_vocab: int
    name: str
    mtp_layers: int = 0  # multi-token-prediction (NextN) blocks appended to the model: its own draft heads

    @classmethod
    def from_headers(cls, first: GGUFHeader, others: list[GGUFHeader] | None = None) -> ModelSummary:
        """`others` are the headers of a split set's later parts, which hold the rest of the tensors."""
        file_type = first.metadata.get("general.file_type")
        context = first.arch_value("context_length")
        return cls(
            architecture=first.architecture,
            n_params=first.n_params + sum(h.n_params for h in others or []),
            quantization=FILE_TYPES.get(int(file_type), f"type {file_type}") if file_type is not None else "unknown",
            context_length=int(context) if context is not None else None,
            vocab_type=vocab_name(first.vocab_type),
            n_vocab=first.n_vocab,
            name=str(first.metadata.get("general.name", "")),
            mtp_layers=int(first.arch_value("nextn_predict_layers") or 0),
        )

    @property
    def mtp_note(self) -> str:
        """What its MTP layers are to localspec, where it has any ('' where none)."""
        if not self.mtp_layers:
            return ""
        heads = f"{self.mtp_layers} MTP layer{'s' if self.mtp_layers > 1 else ''}"
        return f"it carries {heads} (draft heads of its own): --drafter mtp drafts with them"

    def describe(self) -> str:
        context = f"context {self.context_length}" if self.context_length else "context unknown"
        return (
            f"{self.architecture}, {format_params(self.n_params)} parameters, {self.quantization}, {context}, "
            f"vocabulary {self.vocab_type} × {self.n_vocab}"
        )


def format_params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"
