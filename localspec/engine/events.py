"""What the decode loop yields: one event per emitted token, then one when it stops."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from localspec.engine.stats import GenerationStats


class TokenSource(str, Enum):
    ACCEPTED = "accepted"  # proposed by the drafter, confirmed by the target
    CORRECTION = "correction"  # the target's own token where it rejected a draft token
    BONUS = "bonus"  # the target's own token after it accepted the whole draft
    TARGET = "target"  # the target's own token in a step with no draft (plain decoding)


class StopReason(str, Enum):
    EOS = "eos"
    MAX_TOKENS = "max_tokens"
    STOP_STRING = "stop_string"
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    token: int
    text: str  # the text this token completes; "" while a multi-byte character is still open
    source: TokenSource
    step: int
    stats: GenerationStats  # the answer's statistics as they stand after this token (the generation's own, kept current)
    margin: float | None = None  # target's top-1 minus top-2 logit, when recorded


@dataclass(frozen=True)
class Finished:
    reason: StopReason
    stats: GenerationStats
    message: str = ""
    stop_word: str = ""  # the stop string that ended the answer (StopReason.STOP_STRING)
