"""Tiny EAGLE-3 heads over a tiny llama target: llama.cpp's test-llama-archs writes no eagle3 model, so one is written
here as convert_hf_to_gguf writes them (`general.architecture = eagle3`, `eagle3.target_layers`, `fc` over three of the
target's layer inputs, one decoder block over [token embedding, fused features]).

The target is test-llama-archs's llama with its blocks copied to four. A head is random (it rarely agrees), or made to
agree, or never to, with a target that repeats its last token: its blocks add nothing to the residual stream and its
head is its own embedding, so every layer's input is the last token's embedding and its best next token is that token.
The agreeing head's fc passes the first layer's input through and its block adds nothing, so it reads that embedding
and names the same token; negated (-I), its best token is the target's worst.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

from tests.gguf_files import copy_fields, finish

TARGET_BLOCKS = 4
TARGET_LAYERS = (1, 2, 3)  # the target's layers whose inputs the head reads (low, middle, high)
_OUTPUT_PROJECTIONS = (".attn_output.weight", ".ffn_down.weight", ".attn_output.bias", ".ffn_down.bias")


class Head(Enum):
    RANDOM = "random"
    AGREES = "agrees"
    DISAGREES = "disagrees"


def llama_target(source: Path, path: Path, repeats: bool, chat_template: str | None = None) -> Path:
    """`source` (test-llama-archs's llama) with its last block copied up to TARGET_BLOCKS blocks; where `repeats`, a
    target that repeats its last token (the module's docstring); with a chat template where given (the bench formats
    its prompts with it)."""
    reader = GGUFReader(source)
    n_layer = int(reader.fields["llama.block_count"].contents())
    writer = GGUFWriter(path, "llama")
    copy_fields(reader, writer, {"llama.block_count": TARGET_BLOCKS})
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    tensors = {tensor.name: np.array(tensor.data) for tensor in reader.tensors}
    types = {tensor.name: tensor.tensor_type for tensor in reader.tensors}
    for name in list(tensors):
        if name.startswith(f"blk.{n_layer - 1}."):
            for block in range(n_layer, TARGET_BLOCKS):
                copy = name.replace(f"blk.{n_layer - 1}.", f"blk.{block}.", 1)
                tensors[copy], types[copy] = tensors[name], types[name]
    if repeats:
        for name in tensors:
            if name.endswith(_OUTPUT_PROJECTIONS):
                tensors[name] = np.zeros_like(tensors[name])
        tensors["output.weight"] = tensors["token_embd.weight"].copy()
        tensors["output_norm.weight"] = np.ones_like(tensors["output_norm.weight"])
    for name, values in tensors.items():
        writer.add_tensor(name, values, raw_dtype=types[name])
    return finish(writer, path)


def eagle3_head(target: Path, path: Path, head: Head, seed: int = 0, target_hidden_size: int | None = None) -> Path:
    """An EAGLE-3 head for `target` (llama_target's), written to `path`; `target_hidden_size` other than the target's
    makes one meant for another target."""
    reader = GGUFReader(target)
    n_embd = int(reader.fields["llama.embedding_length"].contents())
    n_ff = int(reader.fields["llama.feed_forward_length"].contents())
    n_head = int(reader.fields["llama.attention.head_count"].contents())
    hidden = target_hidden_size or n_embd
    writer = GGUFWriter(path, "eagle3")
    copy_fields(reader, writer, {}, keep=("tokenizer.", "general.name"))
    for key, value in (("block_count", 1), ("context_length", int(reader.fields["llama.context_length"].contents())),
                       ("embedding_length", n_embd), ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                       ("attention.head_count_kv", n_head), ("vocab_size", int(reader.fields["llama.vocab_size"].contents())),
                       ("target_hidden_size", hidden)):
        writer.add_uint32(f"eagle3.{key}", value)
    writer.add_float32("eagle3.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_float32("eagle3.rope.freq_base", 10000.0)
    writer.add_array("eagle3.target_layers", list(TARGET_LAYERS))
    rng = np.random.default_rng(seed)

    def random(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    made = head is not Head.RANDOM
    fc = random(n_embd, 3 * hidden)
    if made:
        sign = 1.0 if head is Head.AGREES else -1.0
        fc = np.hstack([sign * np.eye(n_embd, hidden), np.zeros((n_embd, 2 * hidden))]).astype(np.float32)
    tensors = {name: np.array(tensor.data) for tensor in reader.tensors for name in (tensor.name,)
               if name in ("token_embd.weight", "output.weight", "output_norm.weight")}
    tensors |= {
        "fc.weight": fc,
        "blk.0.attn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_norm_2.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_q.weight": random(n_embd, 2 * n_embd),
        "blk.0.attn_k.weight": random(n_embd, 2 * n_embd),
        "blk.0.attn_v.weight": random(n_embd, 2 * n_embd),
        "blk.0.attn_output.weight": np.zeros((n_embd, n_embd), dtype=np.float32) if made else random(n_embd, n_embd),
        "blk.0.ffn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.ffn_gate.weight": random(n_ff, n_embd),
        "blk.0.ffn_up.weight": random(n_ff, n_embd),
        "blk.0.ffn_down.weight": np.zeros((n_embd, n_ff), dtype=np.float32) if made else random(n_embd, n_ff),
    }
    for name, values in tensors.items():
        writer.add_tensor(name, values)
    return finish(writer, path)
