"""How a prompt is cut into passes, so that its cells and its last row come out bit-identical whatever the cache held.

llama.cpp's CPU kernels round a row differently with the pass around it: measured on the real Q4_K_M target, the
last row of a 200-token prompt read in one pass or as 64 + 136, 96 + 104, 128 + 72 is bit-identical, and as
199 + 1, 32 + 168 or 235 + 65 (of 300) differs by up to 0.6 in a logit, enough to flip a near-tie and so the greedy
answer (issue 46: a prompt cached but for its last token answered otherwise than the same prompt read fresh). The
rule behind those numbers: a row comes out the same in any pass of at least MIN_PASS rows that starts at a multiple
of 4 (the repacked kernels take rows four at a time and the last, partial group another way). ALIGN is 16, the AMX
kernels' tile.

So every prompt read starts at a multiple of ALIGN, and each of its passes holds at least MIN_PASS tokens; a prompt
shorter than that is read whole in one pass, whatever the cache holds. The cells a later prompt may reuse are the
leading ones read that way (a sequence's canonical extent): an answer's cells, decoded a token or a verify batch at a
time, are read again as prompt when a later prompt holds them.
"""

from __future__ import annotations

ALIGN = 16
MIN_PASS = 64


def reusable_prefix(shared: int, canonical: int, n_prompt: int) -> int:
    """How many cached cells a prompt of `n_prompt` tokens keeps: of the `shared` leading ones it has in common with
    the cache, those read canonically, cut to a multiple of ALIGN and back far enough that the rest is one full pass.
    A prompt that is one short pass keeps none: the fresh read is that one pass."""
    if n_prompt < MIN_PASS:
        return 0
    keep = min(shared, canonical, n_prompt - 1) // ALIGN * ALIGN
    if n_prompt - keep < MIN_PASS:
        keep = (n_prompt - MIN_PASS) // ALIGN * ALIGN
    return keep


def next_pass_end(start: int, end: int, n_batch: int) -> int:
    """Where the pass that reads prompt tokens from `start` (a multiple of ALIGN, or 0) towards `end` stops: n_batch
    tokens (a multiple of ALIGN) at most, and never leaving fewer than MIN_PASS for the pass after it."""
    step = max(ALIGN, n_batch // ALIGN * ALIGN)
    if end - start <= step:
        return end
    stop = start + step
    if end - stop < MIN_PASS:
        stop = max(start + MIN_PASS, (end - MIN_PASS) // ALIGN * ALIGN)
    return stop


def is_canonical(start: int, stop: int, n_prompt: int) -> bool:
    """Whether a prompt pass alone in its batch leaves reusable cells: a full pass from an aligned start."""
    return start % ALIGN == 0 and stop - start >= MIN_PASS and n_prompt >= MIN_PASS
