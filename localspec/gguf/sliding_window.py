"""Which blocks of a model look back only a window of tokens, from its header: what the memory planner needs to count a
window layer's cache at its window, not at the whole context.

A header gives the window (`{arch}.attention.sliding_window`) and either a flag per block
(`attention.sliding_window_pattern` as an array) or a period: every n-th block attends fully, the others to the
window. Where it gives neither, the period is the one llama.cpp's loader for that architecture assumes
(src/models/<arch>.cpp, `load_swa_pattern`), copied here for the families people run.
"""

from __future__ import annotations

from localspec.gguf.header import GGUFHeader

# llama.cpp's default period per architecture, and whether the full block comes first in each period (dense_first).
_DEFAULT_PERIODS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "gemma-embedding": (6, False),
    "gpt-oss": (2, False), "cohere2": (4, False), "exaone4": (4, False), "olmo2": (4, False), "llama4": (4, False),
}


def window(header: GGUFHeader) -> int:
    """The window in tokens (0: every block attends to the whole context)."""
    return int(header.arch_value("attention.sliding_window") or 0)


def window_blocks(header: GGUFHeader, n_layer: int) -> list[bool]:
    """Per block, whether it attends to the window only (all False for a model without one)."""
    if window(header) <= 0:
        return [False] * n_layer
    pattern = header.arch_value("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return [bool(flag) for flag in pattern[:n_layer]] + [False] * (n_layer - len(pattern))
    period, dense_first = (int(pattern), False) if isinstance(pattern, int) else _DEFAULT_PERIODS.get(header.architecture, (0, False))
    if period == 0:
        return [True] * n_layer
    return [(block % period != 0) if dense_first else (block % period < period - 1) for block in range(n_layer)]


def window_cells(n_swa: int, n_ctx: int, n_batch: int, n_seq: int = 1) -> int:
    """The cells llama.cpp's small window cache holds (llama-kv-cache-iswa.cpp): the window of every sequence and a
    batch's worth, padded to 256, never more than the context."""
    padded = -(-(n_swa * n_seq + n_batch) // 256) * 256
    return min(n_ctx, padded)
