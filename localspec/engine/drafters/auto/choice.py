"""What auto chose for one step: the one record the controller (one sequence), the batch planner (many) and the
statistics share."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from localspec.engine.drafters.registry import DRAFTERS


class _Named(type):
    """Sources iterate as an enum's members do: every registry row's name, and the grammar's."""

    def __iter__(cls) -> Iterator[Source]:
        return (Source(name) for name in (*DRAFTERS, "grammar"))


class Source(str, metaclass=_Named):
    """What drafts a step's tokens, by the name the statistics give it: a registry row's (plain, lookup, the draft model,
    the hybrid, a head: any row marked an auto source) or the grammar's forced text. One object per name, so sources
    compare with `is` as enum members do; a source the registry gains is one with no edit here."""

    NONE: ClassVar[Source]  # plain decoding: nothing is drafted
    NGRAM: ClassVar[Source]  # prompt lookup
    MODEL: ClassVar[Source]  # the draft model (of the target's tokenizer, or drafting through text)
    HYBRID: ClassVar[Source]  # a lookup run's first tokens, then the draft model from their end
    GRAMMAR: ClassVar[Source]  # the text a grammar forces, drafted ahead of any other source's tokens (engine/grammar.py)
    MTP: ClassVar[Source]  # the target's MTP head
    EAGLE3: ClassVar[Source]  # an EAGLE-3 head
    _named: ClassVar[dict[str, Source]] = {}

    def __new__(cls, name: str) -> Source:
        source = cls._named.get(name)
        if source is None:
            source = cls._named[name] = super().__new__(cls, name)
        return source

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def display_name(self) -> str:
        """The source as a person reads it (the app's panel, generate's summary)."""
        row = DRAFTERS.get(self.value)
        return row.shown if row is not None else self.value


for _name in ("NONE", "NGRAM", "MODEL", "HYBRID", "GRAMMAR", "MTP", "EAGLE3"):
    setattr(Source, _name, Source(_name.lower()))


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
        """The model's share of the draft (all of it for a model source, the rest after the lookup for a hybrid; none for plain or lookup)."""
        return 0 if self.source is Source.NONE or self.source is Source.NGRAM else self.k - self.lookup_k


PLAIN = Choice(Source.NONE, 0, 1.0)
