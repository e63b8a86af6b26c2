"""A tiny model that carries its own draft head: llama.cpp's test-llama-archs writes no MTP (NextN) layers, so a tiny
Qwen3.5 from it gets one appended here, as Qwen3.5/3.6 MTP GGUFs carry it: a copy of its full-attention block with the
NextN tensors (eh_proj over [token embedding, hidden state], and its two norms) as block n_layer, and
`nextn_predict_layers = 1`. llama.cpp loads it with `load_mtp` and drafts from it. Several blocks appended make chained
heads (MiMo-V2's, Step-3.5's), block n_layer + i drafting position i, each made as the head below.

Its head is random (it rarely agrees with the target, which rollback tests want anyway), or made to agree, or never to:
there the target's blocks add nothing to the residual stream (their output projections are zero), so the target
predicts the next token from the current token's embedding alone; the head's eh_proj passes that embedding through
(+I over the token half of [token, hidden]) and its block adds nothing, so it predicts the token after its input token
exactly as the target will, on the same output norm and head. Negated (-I), every logit flips: its best token is the
target's worst.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

from tests.gguf_files import copy_fields, finish


class Head(Enum):
    RANDOM = "random"
    AGREES = "agrees"
    DISAGREES = "disagrees"
    NEAR = "near"  # as AGREES, but the head's block keeps its random projections: it agrees often, not always


NEAR_SCALE = 30.0  # the head's own block outweighs the token it passes through now and then: about half its greedy drafts hold
FUSED_QKV = ("mimo2",)  # architectures whose MTP block has one q/k/v projection
_OUTPUT_PROJECTIONS = (".attn_output.weight", ".ffn_down.weight", ".ssm_out.weight", ".ffn_down_exps.weight", ".ffn_down_shexp.weight")


def with_mtp_blocks(source: Path, path: Path, heads: Sequence[Head] = (Head.RANDOM,), seed: int = 0,
                    chat_template: str | None = None) -> Path:
    """`source` (a tiny qwen35, or an attention-only mimo2) with an MTP block appended per head, written to `path` (with
    a chat template where given: the app formats conversations with it). Several blocks make chained heads, block i
    drafting position i (MiMo-V2's and Step-3.5's); made heads (any but RANDOM) need the target's blocks silenced, so
    they are made all alike or all random."""
    reader = GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    n_layer = int(reader.fields[f"{arch}.block_count"].contents())
    n_embd = int(reader.fields[f"{arch}.embedding_length"].contents())
    writer = GGUFWriter(path, arch)
    changed: dict[str, object] = {f"{arch}.block_count": n_layer + len(heads), f"{arch}.nextn_predict_layers": len(heads)}
    for per_block in ("attention.recurrent_layers", "attention.sliding_window_pattern"):  # the MTP blocks attend, in full
        if (field := reader.fields.get(f"{arch}.{per_block}")) is not None and isinstance(values := field.contents(), list):
            changed[f"{arch}.{per_block}"] = [*values, *[False if per_block.endswith("layers") else 0] * len(heads)]
    copy_fields(reader, writer, changed)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    # The block copied into each MTP block: one that attends with a dense feed-forward (MiMo-V2's MTP graph asserts both).
    full = max(int(t.name.split(".")[1]) for t in reader.tensors if t.name.endswith(".attn_q.weight")
               and any(other.name == t.name.replace("attn_q", "ffn_gate") for other in reader.tensors))
    made = all(head is not Head.RANDOM for head in heads)
    if not made and any(head is not Head.RANDOM for head in heads):
        raise ValueError("made heads need the target's blocks silenced: make them all, or none")

    def data(tensor) -> np.ndarray:  # type: ignore[no-untyped-def]
        values = np.array(tensor.data)
        return np.zeros_like(values) if made and tensor.name.endswith(_OUTPUT_PROJECTIONS) else values

    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, data(tensor), raw_dtype=tensor.tensor_type)
    block = {tensor.name.removeprefix(f"blk.{full}."): tensor for tensor in reader.tensors if tensor.name.startswith(f"blk.{full}.")}
    fused = arch in FUSED_QKV
    rng = np.random.default_rng(seed)
    for index, head in enumerate(heads, start=n_layer):
        for name, tensor in block.items():
            if fused and name.startswith(("attn_q.", "attn_k.", "attn_v.")):
                continue  # MiMo-V2's MTP block reads one fused projection, written below
            values = data(tensor)
            if head is Head.NEAR and tensor.name.endswith(_OUTPUT_PROJECTIONS):
                values = np.array(tensor.data) * NEAR_SCALE
            writer.add_tensor(f"blk.{index}.{name}", values, raw_dtype=tensor.tensor_type)
        if fused:
            qkv = np.concatenate([np.array(block[f"attn_{part}.weight"].data) for part in "qkv"], axis=0)
            writer.add_tensor(f"blk.{index}.attn_qkv.weight", qkv)
        eh_proj = (rng.standard_normal((n_embd, 2 * n_embd)) * 0.02).astype(np.float32)
        if made:
            sign = -1.0 if head is Head.DISAGREES else 1.0
            eh_proj = np.hstack([sign * np.eye(n_embd), np.zeros((n_embd, n_embd))]).astype(np.float32)
        writer.add_tensor(f"blk.{index}.nextn.eh_proj.weight", eh_proj)
        writer.add_tensor(f"blk.{index}.nextn.enorm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{index}.nextn.hnorm.weight", np.ones(n_embd, dtype=np.float32))
    return finish(writer, path)
