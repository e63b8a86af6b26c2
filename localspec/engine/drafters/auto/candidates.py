"""What a slot could draft this step: plain decoding, each K of its lookup run, each K of each model source, and the
hybrid that continues the run with the draft model; each with the tokens it is expected to emit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.auto.agreement import AgreementModel
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.choice import PLAIN, Choice, Source
from localspec.engine.drafters.auto.hybrid_plan import best_hybrid
from localspec.engine.drafters.auto.model_source import ModelSource
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable


@dataclass(frozen=True)
class SlotOptions:
    """What a slot could draft this step."""

    cap: int  # the most draft tokens it may take (its K, its room in the context, its tokens left)
    lookup: Lookup  # prompt lookup's run here (maybe empty)
    # tokens each model source must read before it drafts for this slot (one number: every source's)
    pending: int | Mapping[Source, int]
    belief: SequenceBelief = field(default_factory=SequenceBelief)  # what the slot's answer has shown so far
    # tokens a grammar forces ahead of the choice's (Ask.after): verified in the same pass, priced as sure to be kept, and
    # read by a model source before it drafts
    forced: int = 0

    def pending_for(self, source: Source) -> int:
        return self.pending if isinstance(self.pending, int) else self.pending.get(source, 0)


@dataclass(frozen=True)
class Candidates:
    """A slot's candidates in the order the search weighs them (among equals the earlier, plainer one stays): plain and
    each K of lookup, held as their curve (the search prices them together), then those that ask a model."""

    lookup: list[float]  # expected accepted tokens among the lookup run's first k (index k; index 0 is plain decoding)
    drafting: list[Choice] = field(default_factory=list)  # each K of each model source, then its hybrid

    def lookup_choice(self, k: int) -> Choice:
        return Choice(Source.NGRAM, k, 1 + self.lookup[k]) if k else PLAIN

    def without_models(self) -> Candidates:
        return Candidates(self.lookup)


def lookup_curves(options: SlotOptions, acceptance: AgreementModel, costs: CostTable) -> tuple[list[float], list[float]]:
    """prefix_curves of the slot's lookup run, as far as its cap (and its answer's budget for thin bets) lets it draft
    (index k: its first k tokens)."""
    lookup, belief = options.lookup, options.belief
    if not lookup.tokens:
        return [0.0], [1.0]
    k = belief.lookup_cap(costs, lookup.match_length, min(options.cap, len(lookup.tokens)))
    return acceptance.prefix_curves(lookup.match_length, k, belief.confidence.unsure, lookup.own, belief.copy_effect,
                                    belief.edit_points.judge(lookup.tokens[:k], lookup.own))


def model_curve(options: SlotOptions, k: int, source: ModelSource) -> list[float]:
    """A model's expected accepted tokens among its first 0..k, in the class of the slot's confidence."""
    return source.acceptance[options.belief.confidence.class_index].prefix_curves(k)[0]


def candidates(options: SlotOptions, sources: Sequence[ModelSource], acceptance: AgreementModel, costs: CostTable) -> Candidates:
    """Plain, each K of lookup and of each model source, and the hybrid (j, m) that is best as a step of its own (one
    candidate, not all j x m: the search weighs it in the batch like the others)."""
    lookup_expected, lookup_survive = lookup_curves(options, acceptance, costs)
    found = Candidates(lookup_expected)
    n_lookup = len(lookup_expected) - 1
    for source in sources:
        if options.forced and not source.continues_lookup:
            continue
        model_k = min(options.cap, source.k_max)
        model_expected = model_curve(options, model_k, source)
        vouched = source.acceptance.vouched(options.belief.confidence.class_index, model_k)
        found.drafting.extend(Choice(source.source, k, 1 + model_expected[k], vouched=1 + vouched[k]) for k in range(1, len(model_expected)))
        if not source.continues_lookup:
            continue
        hybrid = best_hybrid(costs, source.costs, max(1, options.pending_for(source.source)), options.belief.resume_runs.expected,
                             n_lookup, options.cap, lookup_expected, lookup_survive, model_expected)
        if hybrid is not None:
            j, m = hybrid.lookup_k, hybrid.model_k
            found.drafting.append(Choice(Source.HYBRID, j + m, hybrid.tokens, lookup_k=j,
                                         vouched=1 + lookup_expected[j] + lookup_survive[j] * vouched[m]))
    return found
