"""What one generation asks for: its length, sampling, K and p-min, verification rule, stop strings and grammar."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from localspec.engine import defaults
from localspec.engine.grammar import Grammar
from localspec.engine.penalties import Penalties
from localspec.engine.sampling import SamplingParams

Verification = Literal["keyed", "speculative", "sample-match"]


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = defaults.MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_max: int = defaults.DRAFT_MAX
    draft_p_min: float = defaults.DRAFT_P_MIN
    verification: Verification | None = None  # at temperature > 0 (temperature 0 is always greedy); None: see `rule`
    stop: tuple[str, ...] = ()
    record_margins: bool = False  # evidence for lossless tests; costs a partition per row
    grammar: Grammar | None = None  # what the answer may say (JSON mode): one answer's state, so one config per request
    penalties: Penalties | None = None  # frequency, presence, logit bias: one answer's counts, so one config per request too
    # A chat request's messages (OpenAI-shaped), which its prompt renders: a draft of another tokenizer reads them under
    # its own chat template (bridged.py). Empty for a raw prompt.
    conversation: tuple[Mapping[str, Any], ...] = ()

    @property
    def rule(self) -> Verification:
        """How drafts are judged at temperature > 0: as asked, else keyed draws where a seed is given (sampling.Draws: the
        seed then writes the same answer whatever drafts it), else speculative sampling (the best acceptance)."""
        if self.verification is not None:
            return self.verification
        return "keyed" if self.sampling.seed is not None else "speculative"

    @property
    def draft_sampling(self) -> SamplingParams | None:
        """How drafts are sampled: None (greedy) at temperature 0 and under sample-match, which judges the tokens and
        never q; else from q at the request's own sampling (speculative sampling needs q; keyed draws share the noise)."""
        return None if self.sampling.greedy or self.rule == "sample-match" else self.sampling

    def draft_room(self, room: int, predicted_n: int, limit: int | None = None) -> int:
        """The most tokens a step may draft, K aside: the cells left after the last settled token (`room`), the tokens the
        answer has left besides the target's own, and (several slots) each slot's share of a pass (`limit`). A grammar's
        forced text takes what it needs of it (scheduler.py)."""
        cap = min(room, self.max_tokens - predicted_n - 1)
        return max(0, cap if limit is None else min(cap, limit))

    def draft_cap(self, room: int, predicted_n: int, limit: int | None = None) -> int:
        """The most draft tokens a drafter may propose in a step: K within draft_room."""
        return min(self.draft_max, self.draft_room(room, predicted_n, limit))
