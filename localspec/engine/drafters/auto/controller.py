"""The adaptive drafter (`--drafter auto`): per step and per sequence, the drafter and K with the most tokens per second.

The choices are the planner's (planner.py), made for every sequence asking at
once, so one answer alone and a batch of slots are one policy; this drafter
drafts what it chose (prompt lookup, the draft model for every sequence that
chose it in one batched drafting, or lookup's first tokens then the model) and
tells the planner what each step showed. Each sequence's lookup remembers its
earlier requests (Lookups), so an editor's next request can copy them; the
costs are kept between runs (cost_cache.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.engine.drafters.auto import cost_cache
from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.drafters.auto.agreement import AgreementModel, ShadowRun
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.catch_up import ResumeRuns
from localspec.engine.drafters.auto.choice import PLAIN, Choice, Source
from localspec.engine.drafters.auto.confidence import ConfidenceClasses, TargetConfidence
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSetting, DraftSources, Measured, NewSession, Observation, StepCost, TargetPass, TargetRow
from localspec.engine.drafters.bridged import BridgedDrafter
from localspec.engine.drafters.draft_model import DraftOrder, ModelDrafter
from localspec.engine.drafters.head_drafter import HeadDrafter
from localspec.engine.drafters.ngram import Lookup, Lookups
from localspec.engine.drafters.registry import AUTO_SOURCES, DrafterSpec, PairParts, Part
from localspec.engine.pass_costs import CostTable, PassCosts, calibrate, passes_timed, progress, time_passes
from localspec.engine.tuning import CALIBRATION_REPEATS, CALIBRATION_SIZES


@dataclass
class _Answer:
    """What auto keeps of one sequence: its belief (kept across its requests), its lookup runs waiting to be judged, and
    this step's choice."""

    belief: SequenceBelief = field(default_factory=SequenceBelief)
    shadows: list[ShadowRun] = field(default_factory=list)
    choice: Choice = PLAIN
    drafted: int | None = None  # tokens this step's draft held when the draft model was asked (None: it was not)
    forced: int = 0  # tokens a grammar forced ahead of this step's draft: the settled tokens begin with them


class AutoDrafter(Drafter):
    """auto: each step, the planner's choices for the sequences asking, drafted here."""

    name = "auto"
    costs: CostTable  # always: it prices every step

    def __init__(self, costs: CostTable, model: ModelDrafter | BridgedDrafter | HeadDrafter | None = None, lookups: Lookups | None = None,
                 costs_file: Path | None = None, head: HeadDrafter | None = None) -> None:
        """`model`: what drafts auto's model tokens: the draft model, else the pair's EAGLE-3 head, else the target's own
        MTP head where it carries one (priced by costs.draft). `head`: a head beside the draft model (priced by
        costs.head): each step then drafts with whichever pays."""
        self.costs = costs
        self.costs_file = costs_file  # where the learned costs are kept between runs (None: not kept)
        self.model = model  # the first model source (the draft model where one is loaded)
        source = Source(model.name) if isinstance(model, HeadDrafter) else Source.MODEL
        self.drafting: dict[Source, ModelDrafter | BridgedDrafter | HeadDrafter] = {source: model} if model is not None else {}
        if head is not None:
            self.drafting[Source(head.name)] = head
        self.models = tuple(m for drafter in self.drafting.values() for m in drafter.models)
        self.lookups = lookups or Lookups()
        # the policy and what it learns, kept across requests
        self.planner = Planner(costs, model is not None, source, Source(head.name) if head is not None else None,
                               {source: drafter.chained_heads for source, drafter in self.drafting.items()
                                if isinstance(drafter, HeadDrafter) and drafter.chained_heads})
        self._answers: dict[int, _Answer] = {}
        self._drafting_ms = 0.0  # this step's draft-model passes, which the planner prices apart from the step's overhead

    def measured(self) -> Measured:
        """Its sources' own work, and the costs it prices steps with."""
        ns: dict[str, int] = {}
        for drafter in self.drafting.values():
            for name, spent in drafter.measured().ns.items():
                ns[name] = ns.get(name, 0) + spent
        return Measured(ns, self.costs)

    def _answer(self, seq: int) -> _Answer:
        answer = self._answers.get(seq)
        if answer is None:
            answer = self._answers[seq] = _Answer()
        return answer

    def belief(self, seq: int) -> SequenceBelief:
        """What `seq`'s answers have shown (the planner weighs its choices by it)."""
        return self._answer(seq).belief

    # What auto has learned, as a lone answer (sequence 0) sees it: the statistics and the tests read these.
    @property
    def confidence(self) -> TargetConfidence:
        return self.belief(0).confidence

    @property
    def resume_runs(self) -> ResumeRuns:
        """What a catch-up is spread over (catch_up.py); kept across requests."""
        return self.belief(0).resume_runs

    @property
    def lookup_acceptance(self) -> AgreementModel:
        return self.planner.lookup_acceptance

    @property
    def draft_acceptance(self) -> ConfidenceClasses:
        return self.planner.draft_acceptance

    @property
    def model_acceptance(self) -> AcceptanceModel:
        """The draft model's acceptance in the target's present confidence class."""
        return self.planner.draft_acceptance[self.confidence.class_index]

    @property
    def exploration(self) -> ExplorationBudget:
        return self.planner.exploration

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        self.lookups[seq].start(prompt)
        for drafter in self.drafting.values():
            drafter.begin(seq, prompt)
        answer = self._answer(seq)
        answer.shadows, answer.choice, answer.drafted, answer.forced = [], PLAIN, None, 0
        answer.belief.new_answer()
        self.planner.start_answer()

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        answers = [self._answer(ask.seq) for ask in asks]
        options = []
        for ask, answer in zip(asks, answers):
            lookup = self.lookups[ask.seq].lookup(ask.k, ask.after) if ask.k else Lookup()
            answer.belief.looked(lookup)
            self.planner.watch_lookup(answer.shadows, lookup, answer.belief.confidence.unsure)
            pending = {source: drafter.pending_tokens(ask.seq) for source, drafter in self.drafting.items()}
            options.append(SlotOptions(ask.k, lookup, pending, answer.belief, len(ask.after)))
        choices = self.planner.plan(options)
        orders: dict[Source, list[DraftOrder]] = {}
        for ask, answer, option, choice in zip(asks, answers, options, choices):
            answer.choice, answer.drafted, answer.forced = choice, None, len(ask.after)
            if choice.model_k:
                source = self.planner.source_of(choice).source
                answer.belief.asked(option.pending_for(source))
                # Greedy at T > 0 too: its tokens are then judged as lookup's are (a one-hot q), one draw for each settled
                # position, as plain sampling draws (verify_speculative).
                orders.setdefault(source, []).append(DraftOrder.of(ask, [*ask.after, *option.lookup.tokens[: choice.lookup_k]], k=choice.model_k,
                                                                   greedy=True))
        continuations: dict[Source, Iterator[Draft]] = {}
        self._drafting_ms = 0.0
        for source, ordered in orders.items():
            drafter = self.drafting[source]
            continuations[source] = iter(drafter.draft(ordered))
            for n_tokens, ms in drafter.passes:  # each pass teaches its model's cost at its size, its tokens' choice included
                self.planner.observe_draft_pass(n_tokens, ms, source)
                self._drafting_ms += ms
        drafts = []
        for ask, answer, option, choice in zip(asks, answers, options, choices):
            if choice.model_k:
                continued = next(continuations[self.planner.source_of(choice).source]).tokens
                draft = Draft.deterministic([*option.lookup.tokens[: choice.lookup_k], *continued], ask.sampling)
                answer.drafted = len(draft.tokens)
            else:
                draft = Draft.deterministic(option.lookup.tokens[: choice.k], ask.sampling)  # K = 0 (plain) proposes nothing
            draft.choice = choice  # the loop records it in the statistics
            drafts.append(draft)
        return drafts

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        answer = self._answer(seq)
        choice, belief = answer.choice, answer.belief
        # What settled where auto's own draft stood, after the forced text; where the target did not keep all of that
        # text (it spelled it with other tokens), auto's draft was never judged, and the step teaches as a plain one.
        judged = len(tokens) > answer.forced
        own = tokens[answer.forced :] if judged else tokens[-1:]
        belief.stepped(self.costs, choice.k if choice.source is Source.NGRAM and judged else 0, own)
        if answer.drafted is not None and judged:
            self.planner.observe_model(choice, belief.asked_class, answer.drafted, len(own) - 1)
        answer.shadows = self.planner.settle(answer.shadows, own, belief.copy_effect)
        self.lookups[seq].advance(tokens)
        for drafter in self.drafting.values():
            drafter.accept(seq, tokens)

    def observe(self, seen: Observation) -> None:
        """The target's rows teach each answer's confidence; a step's cost teaches the verify cost, and what a step costs
        besides its passes, whatever it drafts; the rest is its sources' (a head reads the target's passes)."""
        if isinstance(seen, TargetRow):
            self._answer(seen.seq).belief.observe_target(seen.row)
        elif isinstance(seen, StepCost):
            self.planner.observe_verify(seen.n_verified, seen.verify_ms)
            self.planner.observe_overhead(max(0.0, seen.outside_ms - self._drafting_ms))
        elif isinstance(seen, NewSession):
            self.lookups.forget_requests()
        elif isinstance(seen, TargetPass):  # not a PromptRead: a source reads the prompt only once asked to draft
            for drafter in self.drafting.values():
                drafter.observe(seen)

    def end(self, seq: int) -> None:
        """Keep what this answer taught about the costs for the next run."""
        for drafter in self.drafting.values():
            drafter.end(seq)
        if self.costs_file is not None and not self.costs.fixed:
            cost_cache.save(self.costs_file, self.costs)

    def close(self) -> None:
        for drafter in self.drafting.values():
            drafter.close()


def build(sources: DraftSources) -> Drafter:
    # auto drafts with the registry's sources that the pair offers the parts of (a row whose parts one taken already
    # drafts with adds nothing: bridged beside model), a draft model first: it is priced by costs.draft, with the target's
    # passes and kept in the cost cache when it ran on this machine before; a head beside it by costs.head, timed at each
    # load (the cache is keyed by the target and draft files, and a head is neither). A draft model reads the prompt only
    # if auto picks it (observe): where it never pays, the first token does not wait for a draft prefill. Several slots
    # share the loop's costs, timed at batch sizes, and keep them to themselves.
    parts, setting = PairParts(sources.offers), sources.setting
    rows: list[DrafterSpec] = []
    for row in AUTO_SOURCES:
        if not parts.lacks(row) and not any(row.requires <= taken.requires for taken in rows):
            rows.append(row)
    rows.sort(key=lambda row: not row.needs_draft_model)
    drafting = [_source(row.build(sources)) for row in rows]
    model, head = (drafting + [None, None])[:2]
    draft_model = sources.part(Part.DRAFT_MODEL) if rows and rows[0].needs_draft_model else None
    lookups = Lookups(ends_answer=sources.target.vocab.is_eog)
    costs_file = None
    if setting.batch_costs is not None:
        costs = setting.batch_costs
    else:
        if setting.cost_cache_dir and (model is None or draft_model is not None):
            costs_file = cost_cache.cache_file(setting.cost_cache_dir, sources.target, draft_model)
        costs = (cost_cache.load(costs_file) if costs_file else None) or calibrate(sources.target, draft_model, on_stage=setting.report)
    if isinstance(model, HeadDrafter) and not costs.has_draft:  # a head drafts first: its passes, timed as a draft model's are
        costs.draft = _time_head(model, setting)
    if isinstance(head, HeadDrafter) and costs.head is None:  # beside the draft model: its own table, timed at each load
        costs.head = _time_head(head, setting)
    return AutoDrafter(costs, model, lookups, costs_file=costs_file, head=head if isinstance(head, HeadDrafter) else None)


def _source(drafter: Drafter) -> ModelDrafter | BridgedDrafter | HeadDrafter:
    """A registry source as auto drives it: it drafts for DraftOrders and tells its passes' costs."""
    if not isinstance(drafter, ModelDrafter | BridgedDrafter | HeadDrafter):
        raise TypeError(f"the {drafter.name} drafter is marked an auto source but drafts no DraftOrder")
    return drafter


def _time_head(head: HeadDrafter, setting: DraftSetting) -> PassCosts:
    view = head.timing_view()
    tick = progress(setting.report, "the draft head's", passes_timed(view, CALIBRATION_SIZES, CALIBRATION_REPEATS))
    return time_passes(view, CALIBRATION_SIZES, CALIBRATION_REPEATS, tick)
