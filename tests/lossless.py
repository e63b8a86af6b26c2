"""Greedy losslessness, stated so that it holds on every machine: exact where the target is sure, and a
departure only where its two best logits nearly tie.

llama.cpp's kernels round differently with the batch size (a verify pass of K+1 rows against plain decoding's
one row) and with the CPU they were built for. On the tiny models the two paths were measured to differ by up
to 0.004 in a logit (`python -m tests.tools.batched_vs_single`), and their greedy runs do come
within 0.0015 of a tie: at such a place either token is the target's own choice up to rounding, and which one a
machine picks is not the engine's doing. So every comparison here takes one of two forms:
- `assert_lossless`: the runs are equal up to their first departure, and that departure sits at a near-tie;
- `assert_clear_of_ties`: a precondition for tests that demand exact agreement everywhere (an identical draft
  accepted at every position, a CLI's or the app's text equal to the engine's): the target's own greedy run has
  no near-tie, so on any machine a disagreement would be a real bug.
"""

from __future__ import annotations

from pathlib import Path

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import Run, run

NEAR_TIE_TINY = 0.01  # 2.5 x the largest batched-versus-single logit difference measured on the tiny models


def margins(run: Run) -> list[float]:
    """The top-2 logit gap behind each emitted token (runs from conftest.run record them)."""
    gaps = [e.margin for e in run.events if e.token >= 0]
    assert all(gap is not None for gap in gaps), "run without record_margins: use tests.conftest.run"
    return gaps


def first_departure(plain: Run, other: Run) -> int | None:
    """The first position where the two token sequences differ (a length difference counts), or None."""
    for i, (a, b) in enumerate(zip(plain.tokens, other.tokens)):
        if a != b:
            return i
    return None if len(plain.tokens) == len(other.tokens) else min(len(plain.tokens), len(other.tokens))


def assert_lossless(plain: Run, other: Run, near_tie: float = NEAR_TIE_TINY, label: str = "") -> None:
    """`other` is the target's greedy output: equal to plain decoding, or departing first at a near-tie."""
    at = first_departure(plain, other)
    if at is None:
        return
    assert at < min(len(plain.tokens), len(other.tokens)), f"{label}: one run stopped early at token {at}"
    gap = min(margins(plain)[at], margins(other)[at])
    assert gap < near_tie, f"{label}: departs from plain decoding at token {at}, where the top-2 gap is {gap:.4f}: not a near-tie"


def assert_clear_of_ties(plain: Run, near_tie: float = NEAR_TIE_TINY) -> None:
    """Precondition: the target is sure of every token of this greedy run, so exact agreement is required anywhere."""
    gaps = margins(plain)
    worst = min(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[worst] >= near_tie, (
        f"the test's prompt has a near-tie at token {worst} (top-2 gap {gaps[worst]:.4f}): "
        "exact agreement there depends on the machine's rounding; pick a prompt or length clear of ties"
    )


def plain_text(target: Path, prompt: str, max_tokens: int) -> str:
    """The target's greedy answer, checked clear of near-ties: a front door's speculative answer must equal it on any machine."""
    with Engine(EngineConfig(target)) as engine:
        tokens = chat_prompt_tokens(engine.target, [Message("user", prompt)])
        plain = run(engine.plain, tokens, GenerationConfig(max_tokens=max_tokens))
    assert_clear_of_ties(plain)
    return plain.text
