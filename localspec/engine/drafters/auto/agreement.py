"""Prompt lookup's acceptance: its first tokens by how far its source agrees, the rest pooled across all runs.

A lookup run copies what followed an earlier occurrence of the last few tokens: a 2-token match is a coincidence as
often as not, a 20-token one a copy. So a run's first EARLY tokens are judged by its agreement class, learned apart
where the target is unsure (prose) and by where the source is (the prompt or the answer's own text), because each of
those changes how often a short match holds; past them a copy goes on alike whatever it started from, so those
positions pool every run's evidence. Each answer also keeps its CopyEffect, because answers differ in how often they
break their copies (a rename copies to the end, type annotations break at every signature). The measurements that
chose each rule are in the commits that made them (`git log -- localspec/engine/drafters/auto/agreement.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from localspec.engine.drafters.auto.acceptance import AcceptanceModel, prefix_curves
from localspec.engine.drafters.auto.edit_points import EditedRun
from localspec.engine.drafters.edits import RESUMED
from localspec.engine.tuning import COPY_PRIOR, EARLY, EFFECT_WEIGHT, LONG, MATCH_CLASS_PRIORS, SHORT, UNSURE_PRIORS


def fresh_classes(unsure: bool = False) -> dict[int, AcceptanceModel]:
    """A model per agreement class at its prior (`unsure`: the classes below SHORT, at their priors in unsure text)."""
    return {bound: AcceptanceModel(prior) for bound, prior in (UNSURE_PRIORS if unsure else MATCH_CLASS_PRIORS).items()}


@cache
def match_class(agreement: int) -> int:
    """The class a run from `agreement` agreeing tokens is judged in (kept per agreement: every run is judged, taught and
    scaled by it, many times a step)."""
    return max((bound for bound in MATCH_CLASS_PRIORS if agreement >= bound), default=min(MATCH_CLASS_PRIORS))


def is_long_copy(match_length: int) -> bool:
    """A run from this agreement is a copy whose hazard is also its answer's own (CopyEffect)."""
    return match_class(match_length) >= LONG


@dataclass
class SourceClasses:
    """What the runs from one kind of source showed: the prompt's (and earlier requests'), or the answer's own text."""

    early: dict[int, AcceptanceModel] = field(default_factory=fresh_classes)  # the first EARLY positions by class
    unsure: dict[int, AcceptanceModel] = field(default_factory=lambda: fresh_classes(unsure=True))  # short ones, unsure text
    deep: AcceptanceModel = field(default_factory=lambda: AcceptanceModel(COPY_PRIOR, pooled=True))  # the positions past

    def first(self, match_length: int, unsure: bool) -> AcceptanceModel:
        bound = match_class(match_length)
        return self.unsure[bound] if unsure and bound < SHORT else self.early[bound]

    def models(self) -> list[AcceptanceModel]:
        return [*self.early.values(), *self.unsure.values(), self.deep]


@dataclass
class CopyEffect:
    """How one answer's long copies hold against the learned rates (docstring): the misses they showed and the misses
    those rates expected of the same positions."""

    misses: float = 0.0
    expected: float = 0.0

    @property
    def factor(self) -> float:
        """What this answer's hazard is, as a multiple of the learned one."""
        return (self.misses + EFFECT_WEIGHT) / (self.expected + EFFECT_WEIGHT)

    def apply(self, rates: Sequence[float]) -> list[float]:
        factor = self.factor
        return [1 - min(1.0, (1 - rate) * factor) for rate in rates]

    def observe(self, rates: Sequence[float], start: int, held: int, missed: bool) -> None:
        """Positions start..held-1 held, then (`missed`) position `held` did not, where the rates expected `rates`."""
        end = held + 1 if missed else held
        self.expected += sum(1 - rate for rate in rates[start:end])
        self.misses += missed


@dataclass
class AgreementModel:
    """A lookup run's acceptance by position: the first EARLY by its agreement class, the rest shared; each apart by
    where the run's source is (the prompt, or the answer's own text)."""

    given: SourceClasses = field(default_factory=SourceClasses)
    own: SourceClasses = field(default_factory=SourceClasses)

    def rates(self, match_length: int, k: int, unsure: bool = False, own: bool = False) -> list[float]:
        """The learned rates of a run's first k positions, from `match_length` (`unsure`: where the target is; `own`: its
        source is the answer's own text)."""
        source = self.own if own else self.given
        rates = source.first(match_length, unsure).rates(min(k, EARLY))
        return rates + source.deep.rates(k - len(rates))

    def prefix_curves(self, match_length: int, k: int, unsure: bool = False, own: bool = False,
                      effect: CopyEffect | None = None, edits: EditedRun | None = None) -> tuple[list[float], list[float]]:
        """acceptance.prefix_curves of such a run, k tokens long; a long copy's as this answer's `effect` scales them; the
        run's as its answer's edit points judge its positions (`edits`)."""
        rates = self.rates(match_length, k, unsure, own)
        if effect is not None and is_long_copy(match_length):
            rates = effect.apply(rates)
        if edits is not None:
            rates = edits.apply(rates)
        return prefix_curves(rates)

    def carry_over(self, weight: float) -> None:
        """A new answer: what earlier answers' runs showed stays its belief, worth at most `weight` runs per position, so
        this answer's own runs (judged every step, drafted or not) soon outweigh it."""
        for source in (self.given, self.own):
            for model in source.models():
                model.carry_over(weight)

    def forget_guesses(self) -> None:
        """A new answer: whether guesses past its edits pay (it renames, or rewrites freely) is its own, learned anew."""
        for source in (self.given, self.own):
            source.early[RESUMED] = AcceptanceModel(MATCH_CLASS_PRIORS[RESUMED])
            source.unsure[RESUMED] = AcceptanceModel(UNSURE_PRIORS[RESUMED])

    def expected_accepted(self, match_length: int, k: int, unsure: bool = False, own: bool = False) -> float:
        return self.prefix_curves(match_length, k, unsure, own)[0][k]

    def observe(self, match_length: int, n_drafted: int, n_accepted: int, unsure: bool = False, own: bool = False) -> None:
        """A run of `n_drafted` tokens from `match_length` of which the first `n_accepted` held."""
        self.observe_positions(match_length, 0, min(n_drafted, n_accepted), n_accepted < n_drafted, unsure, own)

    def observe_positions(self, match_length: int, start: int, held: int, missed: bool, unsure: bool = False,
                          own: bool = False, effect: CopyEffect | None = None) -> None:
        """A run from `match_length` whose positions start..held-1 held, then (`missed`) position `held` did not; a long
        copy's also teach its answer's `effect`, against the rates as they were."""
        if effect is not None and is_long_copy(match_length):
            effect.observe(self.rates(match_length, held + 1, unsure, own), start, held, missed)
        source = self.own if own else self.given
        if start < EARLY:
            source.first(match_length, unsure).observe_positions(start, min(held, EARLY), missed and held < EARLY)
        if held > EARLY or (missed and held == EARLY):
            source.deep.observe_positions(max(0, start - EARLY), held - EARLY, missed)


@dataclass
class ShadowRun:
    """A lookup run waiting for the text that follows it, which tells how much of it would have been accepted. Each
    position teaches as soon as it is judged: a long copy's run is decided only when the copy ends, and taught only
    then, auto drafted a copy's first 32 tokens 3 at a time on the priors alone."""

    match_length: int  # the agreement it started from
    tokens: list[int]
    unsure: bool = False  # found where the target had lately been unsure
    own: bool = False  # its source is the answer's own text
    matched: int = 0
    taught: int = 0  # positions already taught

    def judge(self, tokens: Sequence[int]) -> bool:
        """Compare the next settled tokens; True once the run is decided (a mismatch, or all of it matched)."""
        for token in tokens:
            if token != self.tokens[self.matched]:
                return True
            self.matched += 1
            if self.matched == len(self.tokens):
                return True
        return False

    def teach(self, model: AgreementModel, decided: bool, effect: CopyEffect | None = None) -> None:
        """The positions judged since the last lesson, and the miss that decided the run, if one did."""
        missed = decided and self.matched < len(self.tokens)
        if self.matched > self.taught or missed:
            model.observe_positions(self.match_length, self.taught, self.matched, missed, self.unsure, self.own, effect)
        self.taught = self.matched


def settle(shadows: Sequence[ShadowRun], tokens: Sequence[int], model: AgreementModel,
           effect: CopyEffect | None = None) -> list[ShadowRun]:
    """The next settled tokens judge the waiting runs and teach `model` (and their answer's `effect`) what they showed;
    the undecided are returned."""
    undecided = []
    for shadow in shadows:
        decided = shadow.judge(tokens)
        shadow.teach(model, decided, effect)
        if not decided:
            undecided.append(shadow)
    return undecided
