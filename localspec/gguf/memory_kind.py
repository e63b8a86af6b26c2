"""A model's memory kind from its header's architecture alone, for `check`, which reads no weights: llama.cpp's own
lists (src/llama-arch.cpp: llm_arch_is_recurrent, llm_arch_is_hybrid, llm_arch_supports_rs_rollback), copied. A loaded
model asks llama.cpp itself (engine/llama/model.py), so a later llama.cpp that rolls back more architectures is used
as soon as it is installed; only this early word lags until the lists here follow.
"""

from __future__ import annotations

from localspec.engine.llama.memory import MemoryKind

_RECURRENT = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
_HYBRID = {"jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "qwen3next",
           "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01"}
_ROLLS_BACK = {"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2",
               "lfm2moe", "bailingmoe3"}


def memory_kind(architecture: str) -> MemoryKind:
    if architecture not in _RECURRENT | _HYBRID:
        return MemoryKind.ATTENTION
    return MemoryKind.SNAPSHOTS if architecture in _ROLLS_BACK else MemoryKind.RECURRENT


def is_recurrent_architecture(architecture: str) -> bool:
    """Every block keeps a recurrent state and none attends (Mamba, RWKV); a hybrid's blocks are of both kinds."""
    return architecture in _RECURRENT
