"""Prompt lookup's acceptance: its first tokens by how far its source agrees, the rest pooled across all runs.

A lookup run copies what followed an earlier occurrence of the last few tokens.
Whether its first tokens are right depends on how long the source agrees with
the text before the cursor: a 2-token match is a coincidence as often as not, a
20-token one a copy. Once a run has held for a few tokens it is a copy, whatever
it started from, and goes on until the next edit: a copy's length past that
point looks alike for every class, so those positions learn from every run
together. Kept apart per class, they had so little evidence that their prior
ruled (a 6-token match was expected to hold 15 tokens 0.5% of the time, where
code edits copy stretches of 10 on average), and a long copy was drafted 3
tokens at a time. Even pooled, a copy's far positions are reached by few runs:
each had a try or two, so the prior still ruled there, and on a Q8_0 target a
rename's 30-token copies were mostly drafted 7 at a time. So where a position's
own evidence is thin it leans on every deep position's together (a copy goes on
alike from token to token), and keeps its own where it has plenty (copies that
break where a line ends). On the Q8_0 target the whole bench, three rounds, took
rename from 1.95x to 2.10x plain, the other prompts within 0.04; on the Q4_K_M
target, whose rename already drafted 15 at a time, every prompt stayed within
noise.

A short match is a coincidence or a copy depending on the text: where the target
has lately been unsure (prose, a free answer), a 2- or 3-token match's next token
held 10-30% of the time on the bench's answers, against about half where it was
sure (code). So the short classes learn apart in unsure text; one rate for both
drafted failing 3-token runs through chat and a haiku. A guess past an edit
(RESUMED) is the extreme case: where the target was unsure, 1-2 of the 19-20 on
the bench's plain answers held (both targets), against a quarter from the prompt
and 0.7 from the answer's own text where it was sure. Every answer learns its
guesses anew, so their prior drives an answer's first bets: at the sure text's
0.3, a prose answer bet on one or two (a haiku's 22 tokens: 1-3% lost on a
2-core CPU). Replayed over 20 shuffled orders of the bench, a prior of 0.1 in
unsure text took the haiku from 0.963x to 0.972x plain on Q8_0, and moved no
prompt down on either target.

Every class learns apart, too, by where the run's source is. A match in the
prompt (or an earlier request) is the answer taking up what it was given; one in
the answer's own text is the answer meeting its own words again. On the bench's
plain answers (both targets) a 2-token match's next token held 0.5-0.8 of the
time from the prompt and 0.2-0.45 from the answer's own text (`in the` twice in
a haiku); a 4- to 11-token match's held 0.87 against 0.49-0.58, and of a
16-token run 46% held against 6-7% (code that repeats its own lines, then
differs). Pooled, a chat that repeats the commands it wrote taught its rate to
the haiku that followed, and a code answer's own repeats drafted long runs that
broke at once; replayed over 20 shuffled orders of the bench, apart took the
mean from 1.313x to 1.323x plain on Q8_0 and 1.336x to 1.342x on Q4_K_M.

A copy's hazard is also the answer's own: one rewrites its source whole (a
rename: every long copy holds to its end), another edits every few tokens (type
annotations: a 25-token match breaks at once, at the next signature). The rates
learned across answers are their mean, and the known-rates replay (each answer's
own rates, given in advance) showed what that costs: a rename's 30-token copies
drafted 3, then 7, then 15 tokens at a time. So each answer keeps its CopyEffect:
the misses its long copies (a match of LONG tokens or more) showed, against what
the learned rates expected of the same positions. It scales their hazard, shrunk
toward the learned rates by EFFECT_WEIGHT expected misses: a rename that has
copied cleanly halves it within its first copies, an answer that breaks more than
expected drafts shorter. Replayed over 20 shuffled orders of six bench files
(stops 37, 39 and 40, both targets), the mean went up on every file (Q8_0
1.3112x -> 1.3156x, 1.3004x -> 1.3077x, 1.3257x -> 1.3263x plain; Q4_K_M 1.2839x
-> 1.2880x, 1.3063x -> 1.3099x, 1.3423x -> 1.3432x), rename on Q8_0 by 2-6%
(2.53x -> 2.66x); no prompt went down by more than 0.8% but a sort-list repeat on
one file (2.5%). Counted from 2-token matches on, it gained less (1.3070x on
the first file); a weight of 1 or 2 moved each file within 0.4% of 4's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.auto.acceptance import AcceptanceModel, prefix_curves
from localspec.engine.drafters.auto.edit_points import EditedRun
from localspec.engine.drafters.edits import RESUMED

# The agreement classes (each holds the lengths from its bound to the next) and how often a run's first tokens hold,
# assumed before any evidence (what the bench's prompts showed). Fine where the rate changes fast: a 3-token match is
# right half the time, an 8-token one 9 times in 10.
MATCH_CLASS_PRIORS = {RESUMED: 0.3, 2: 0.4, 3: 0.5, 4: 0.6, 6: 0.7, 8: 0.8, 12: 0.85, 16: 0.9, 24: 0.9, 32: 0.9}
EARLY = 4  # a run's first positions, judged by its class; past them, by every run's evidence together
COPY_PRIOR = 0.9  # how often a copy that has held EARLY tokens goes on one more, before any evidence
SHORT = 4  # match classes below this learn apart where the target is unsure (docstring)
UNSURE_PRIORS = {bound: prior for bound, prior in MATCH_CLASS_PRIORS.items() if bound < SHORT} | {RESUMED: 0.1}  # (docstring)
LONG = 8  # match classes from this one on are copies, whose hazard is also the answer's own (CopyEffect)
EFFECT_WEIGHT = 4.0  # expected misses' worth of belief in the learned rates, before this answer's copies show otherwise


def fresh_classes(unsure: bool = False) -> dict[int, AcceptanceModel]:
    """A model per agreement class at its prior (`unsure`: the classes below SHORT, at their priors in unsure text)."""
    return {bound: AcceptanceModel(prior) for bound, prior in (UNSURE_PRIORS if unsure else MATCH_CLASS_PRIORS).items()}


def match_class(agreement: int) -> int:
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
