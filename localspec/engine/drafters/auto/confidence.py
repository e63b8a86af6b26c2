"""The draft model's acceptance by how sure the target has just been: a sign of the text that costs no decode.

A draft can only be judged by asking it, but how often it agrees follows how predictable the text is, and the target
says that every step for free (the probability of its own best token, decayed over its last steps). So the draft's
acceptance is learned per class of that confidence, each class starting near the rate it names (capped at PRIOR_MAX):
learned as one rate, prose after code inherited code's acceptance. The confidence also bounds what auto hopes of a
losing draft, so it is not tried where the text is too unsure for any draft to pay at this machine's costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.sampling import greedy_with_confidence
from localspec.engine.tuning import CLASS_EDGES, CONFIDENCE_DECAY, PRIOR_MAX, SURE


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
    """The draft model's acceptance by position, one AcceptanceModel per class of the target's confidence, and what
    the draft's asks showed in every class together (`overall`)."""

    overall: AcceptanceModel = field(default_factory=lambda: AcceptanceModel(0.0))  # its evidence alone is read
    models: list[AcceptanceModel] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.models:
            self.models = [AcceptanceModel(prior, also_teaches=self.overall) for prior in class_priors()]

    def __getitem__(self, class_index: int) -> AcceptanceModel:
        return self.models[class_index]

    def vouched(self, class_index: int, k: int) -> list[float]:
        """prefix_curves' expected tokens as the evidence alone vouches for them: the class's own asks, leaning (where they
        are few) on what the draft showed in every class, never on a prior (a draft never asked vouches for nothing)."""
        return self.models[class_index].prefix_curves(k, lean=self.overall.evidence_rate())[0]

    def carry_over(self, weight: float) -> None:
        for model in (*self.models, self.overall):
            model.carry_over(weight)
