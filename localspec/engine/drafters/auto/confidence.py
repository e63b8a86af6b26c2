"""The draft model's acceptance by how sure the target has just been: a sign of the text that costs no decode.

A draft model can only be judged by asking it, which costs its pass (and, after a
plain stretch, its catch-up on what it missed). But how often it agrees with the
target follows how predictable the text is, and the target says that on every
step for free: the probability of its own best token. Measured on the bench's
answers with the Qwen2.5-Coder 1.5B/0.5B pair (the target's confidence decayed
over its last steps, against the draft's next token being offered at p-min 0.6
and accepted): under 0.6, 0.3-0.4 of the time; 0.6-0.8, 0.4-0.6; 0.8-0.9, 0.8;
0.9-0.95, 0.9; above, 0.96. So the draft's acceptance is learned per class of
that confidence, each class starting from the rate it names (a draft agrees
about as often as the target is sure), capped at PRIOR_MAX. Learned as one
rate, prose after code inherited code's acceptance, and auto asked a silent
draft for most of a haiku.

The target's confidence is also the most auto hopes of the draft: a losing draft
is tried only where it would win accepted as often as the target has lately
been sure (an upper bound: offered at p-min, the draft was accepted about as
often as the square of it), never where the text is too unsure for any draft
to pay at this machine's costs (a haiku on a 2-core CPU: one try took a tenth of
its time), while a GPU's cheap draft passes still are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.sampling import greedy_with_confidence

CLASS_EDGES = (0.6, 0.8, 0.9, 0.95)  # the classes' lower bounds, past the first (from 0)
SURE = 0.9  # below it, the target is unsure: short lookup matches are judged apart there (agreement.py)
# What a class is assumed to accept before evidence is at most this: a draft trusted at once from a prior of 0.93-0.98 was
# asked on Q8_0 code edits where lookup copies most steps, and each ask's catch-up on the copied text cost 0.4-0.7 s
# (rename 2.53x -> 1.71x plain). Evidence raises it in a few asks where the draft is right.
PRIOR_MAX = 0.7
CONFIDENCE_DECAY = 0.7  # per step: the last three or four steps weigh most, so a change of text shows at once


def class_priors() -> list[float]:
    """The acceptance assumed before any evidence: each class's middle, but never above PRIOR_MAX."""
    bounds = (0.0, *CLASS_EDGES, 1.0)
    return [min(PRIOR_MAX, (lo + hi) / 2) for lo, hi in zip(bounds, bounds[1:])]


@dataclass
class TargetConfidence:
    """The target's probability of its own best token at the start of each step, decayed; None before any step."""

    value: float | None = None

    def observe(self, row: np.ndarray) -> None:
        self.observe_probability(greedy_with_confidence(row)[1])

    def observe_probability(self, probability: float) -> None:
        """The target's probability of its own best token at this step (an offline replay knows it without the row)."""
        self.value = probability if self.value is None else CONFIDENCE_DECAY * self.value + (1 - CONFIDENCE_DECAY) * probability

    def forget(self) -> None:
        """A new answer: its text is its own."""
        self.value = None

    @property
    def class_index(self) -> int:
        """The class it falls in; before any step, the most confident (a draft not yet judged is worth a try)."""
        if self.value is None:
            return len(CLASS_EDGES)
        return sum(self.value >= edge for edge in CLASS_EDGES)

    @property
    def unsure(self) -> bool:
        return self.value is not None and self.value < SURE

    @property
    def hope(self) -> float:
        """The most a draft is hoped to be accepted at each position: as often as the target is sure (before any step,
        every time)."""
        return 1.0 if self.value is None else self.value


@dataclass
class ConfidenceClasses:
    """The draft model's acceptance by position, one AcceptanceModel per class of the target's confidence."""

    models: list[AcceptanceModel] = field(default_factory=lambda: [AcceptanceModel(prior) for prior in class_priors()])

    def __getitem__(self, class_index: int) -> AcceptanceModel:
        return self.models[class_index]

    def carry_over(self, weight: float) -> None:
        for model in self.models:
            model.carry_over(weight)
