"""Which blocks of a model keep a recurrent state instead of a KV cache, and how large that state is, from its header:
what the memory planner needs to count a hybrid or recurrent model's memory as llama.cpp allocates it.

A recurrent block holds no cells per token but one state per sequence: a convolution row (R) and a state row (S), f32,
in as many copies as the context keeps per sequence (the state itself and its rollback snapshots,
llama-memory-recurrent.cpp). Which blocks are recurrent is llama.cpp's loader's rule for each architecture
(src/models/<arch>.cpp): the header's `attention.recurrent_layers` where it has one, else every block of a recurrent
architecture, else (hybrids) every block but each `full_attention_interval`-th, or the blocks without KV heads. The row
sizes are llama_hparams::n_embd_r and n_embd_s (src/llama-hparams.cpp) for Mamba-like, gated delta net (Qwen3.5/3.6,
Qwen3-Next), short-convolution (LFM2) and RWKV blocks.
"""

from __future__ import annotations

from localspec.engine.llama.memory import MemoryKind
from localspec.gguf.header import GGUFHeader, per_block
from localspec.gguf.memory_kind import is_recurrent_architecture, memory_kind

_F32 = 4
# Hybrids whose every block is recurrent as well as attending (falcon-h1), and those whose blocks without KV heads
# may be feed-forward blocks, recurrent only without a feed-forward width (nemotron_h).
_EVERY_BLOCK = {"falcon-h1"}
_FEED_FORWARD_BLOCKS = {"nemotron_h", "nemotron_h_moe"}


def recurrent_blocks(header: GGUFHeader, n_layer: int) -> list[bool]:
    """Per block, whether it keeps a recurrent state (all False for an attention-only model)."""
    arch = header.architecture
    if memory_kind(arch) is MemoryKind.ATTENTION:
        return [False] * n_layer
    flags = header.arch_value("attention.recurrent_layers")
    if isinstance(flags, list):
        return [bool(flag) for flag in flags[:n_layer]] + [False] * (n_layer - len(flags))
    if is_recurrent_architecture(arch) or arch in _EVERY_BLOCK:
        return [True] * n_layer
    interval = int(header.arch_value("full_attention_interval") or 0)
    if interval:
        return [(block + 1) % interval != 0 for block in range(n_layer)]
    kv_heads = per_block(header.arch_value("attention.head_count_kv"), n_layer)
    return [heads == 0 and keeps for heads, keeps in zip(kv_heads, _keeps_a_cache(header, n_layer))]


def attending_blocks(header: GGUFHeader, recurrent: list[bool]) -> list[bool]:
    """Per block, whether it keeps a KV cache: every block that is not recurrent, except a feed-forward block of a hybrid
    that has them (nemotron_h: a block with a feed-forward width keeps nothing), and every block of a hybrid that is
    both (falcon-h1)."""
    if header.architecture in _EVERY_BLOCK:
        return [True] * len(recurrent)
    return [not flag and keeps for flag, keeps in zip(recurrent, _keeps_a_cache(header, len(recurrent)))]


def _keeps_a_cache(header: GGUFHeader, n_layer: int) -> list[bool]:
    """Per block, whether it keeps any cache: all but a hybrid's feed-forward blocks (nemotron_h)."""
    if header.architecture not in _FEED_FORWARD_BLOCKS:
        return [True] * n_layer
    return [width == 0 for width in per_block(header.arch_value("feed_forward_length"), n_layer)]


def state_row_bytes(header: GGUFHeader) -> int:
    """One copy of one recurrent block's state for one sequence: its R and S rows, f32 (n_embd_r + n_embd_s)."""
    n_embd = int(header.arch_value("embedding_length") or 0)
    wkv_head_size = int(header.arch_value("wkv.head_size") or 0)
    if wkv_head_size:  # RWKV: token shifts, and a wkv state per head
        return (int(header.arch_value("token_shift_count") or 2) * n_embd + n_embd * wkv_head_size) * _F32
    d_conv = int(header.arch_value("ssm.conv_kernel") or 0)
    d_inner = int(header.arch_value("ssm.inner_size") or 0)
    d_state = int(header.arch_value("ssm.state_size") or 0)
    n_group = int(header.arch_value("ssm.group_count") or 0)
    l_cache = int(header.arch_value("shortconv.l_cache") or 0)
    conv = n_embd * (l_cache - 1) if l_cache else max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    return (conv + d_state * d_inner) * _F32
