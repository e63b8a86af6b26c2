"""What auto chose for one step: the one record the controller (one sequence), the batch planner (many) and the
statistics share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Source(StrEnum):
    """What drafts a step's tokens: its value is the name the statistics give it."""

    NONE = "none"  # plain decoding: nothing is drafted
    NGRAM = "ngram"  # prompt lookup
    MODEL = "model"  # the draft model
    MTP = "mtp"  # the target's MTP head, where the target carries one and no draft model is loaded
    EAGLE3 = "eagle3"  # an EAGLE-3 head, where the pair's draft is one
    HYBRID = "hybrid"  # a lookup run's first tokens, then the draft model from their end
    GRAMMAR = "grammar"  # the text a grammar forces, drafted ahead of any other source's tokens (engine/grammar.py)

    @property
    def display_name(self) -> str:
        """The source as a person reads it (the app's panel, generate's summary)."""
        return DISPLAY_NAMES[self]


DISPLAY_NAMES = {Source.NONE: "plain", Source.NGRAM: "lookup", Source.MODEL: "draft model", Source.MTP: "MTP head",
                 Source.EAGLE3: "EAGLE-3 head", Source.HYBRID: "lookup+model", Source.GRAMMAR: "grammar"}


def label_source(label: str) -> Source:
    """The source a label (draft_label's) names: its first word."""
    return Source(label.split(" ", 1)[0])


def draft_label(source: Source, k: int, lookup_k: int) -> str:
    """A step's choice as the statistics name it: none, "ngram K=3", "hybrid K=3+5" (lookup tokens + the model's)."""
    if k == 0:
        return Source.NONE.value
    if source is Source.HYBRID:
        return f"{source.value} K={lookup_k}+{k - lookup_k}"
    return f"{source.value} K={k}"


@dataclass(frozen=True)
class Choice:
    source: Source
    k: int
    predicted: float  # tokens the step is expected to emit: 1 + expected accepted
    lookup_k: int = 0  # hybrid: the lookup tokens the draft model continues after (k - lookup_k are the model's)
    # The draft model's choices: the tokens its evidence alone vouches for, no prior (planner.plan: an ask that does not
    # win on them is a try)
    vouched: float | None = None

    @property
    def label(self) -> str:
        return draft_label(self.source, self.k, self.lookup_k)

    @property
    def vouched_tokens(self) -> float:
        return self.predicted if self.vouched is None else self.vouched

    @property
    def model_k(self) -> int:
        """The model's share of the draft (all of it for the draft model or the head, the rest after the lookup for a hybrid)."""
        return self.k - self.lookup_k if self.source in (Source.MODEL, Source.MTP, Source.EAGLE3, Source.HYBRID) else 0


PLAIN = Choice(Source.NONE, 0, 1.0)
