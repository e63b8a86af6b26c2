"""The adaptive controller (`--drafter auto`) for one sequence: per step, the drafter and K with the most tokens per second.

The choice is the planner's (planner.py), the same policy that serves a batch of slots, asked for a batch of one;
this drafter drafts what it chose (prompt lookup, the draft model, or lookup's first tokens then the model) and
tells the planner what each step showed. Its lookup remembers earlier requests (LookupMemory), so an editor's next
request can copy them; its costs are kept between runs (cost_cache.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from localspec.engine.drafters.auto import cost_cache
from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.drafters.auto.agreement import AgreementModel, ShadowRun
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.catch_up import ResumeRuns
from localspec.engine.drafters.auto.choice import PLAIN, Choice
from localspec.engine.drafters.auto.confidence import ConfidenceClasses, TargetConfidence
from localspec.engine.drafters.auto.costs import CostTable, calibrate
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.base import Draft, Drafter, DraftSources
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookup, LookupMemory, NgramDrafter
from localspec.engine.sampling import SamplingParams


class AutoDrafter(Drafter):
    """auto for one sequence: each step, the planner's choice for a batch of this one slot, drafted here."""

    name = "auto"
    costs: CostTable  # always: it prices every step

    def __init__(self, costs: CostTable, model: ModelDrafter | None = None, ngram: NgramDrafter | None = None,
                 costs_file: Path | None = None) -> None:
        self.costs = costs
        self.costs_file = costs_file  # where the learned costs are kept between runs (None: not kept)
        self.model = model
        self.models = model.models if model is not None else ()
        self.ngram = ngram or NgramDrafter(memory=LookupMemory())
        self.planner = Planner(costs, model is not None)  # the policy and what it learns, kept across requests
        self.belief = SequenceBelief()  # the answer's own: the target's confidence, resumes, the class last asked in
        self.last_decision = PLAIN
        self._shadows: list[ShadowRun] = []
        self._drafted: int | None = None  # tokens this step's draft held when the draft model was asked (None: it was not)

    @property
    def confidence(self) -> TargetConfidence:
        return self.belief.confidence

    @property
    def resume_runs(self) -> ResumeRuns:
        """What a catch-up is spread over (catch_up.py); kept across requests."""
        return self.belief.resume_runs

    # What the planner has learned, as a lone answer sees it (the statistics and the tests read these).
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

    def _drafters(self) -> list[Drafter]:
        return [d for d in (self.ngram, self.model) if d is not None]

    def start(self, prompt: Sequence[int]) -> None:
        for drafter in self._drafters():
            drafter.start(prompt)
        self._shadows = []
        self.planner.start_answer()
        self.belief.new_answer()

    def decide(self, k_cap: int, lookup: Lookup) -> Choice:
        """The planner's choice for this one sequence, at most `k_cap` draft tokens, given lookup's run here."""
        pending = self.model.pending_tokens if self.model is not None else 0
        return self.planner.plan([SlotOptions("adaptive", k_cap, lookup, pending, self.belief)])[0]

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        lookup = self.ngram.lookup(k)
        self.belief.looked(lookup)
        self.planner.watch_lookup(self._shadows, lookup, self.confidence.unsure)
        decision = self.decide(k, lookup)
        self.last_decision = decision
        self._drafted = None
        if self.model is not None and decision.model_k:
            self.belief.asked(self.model.pending_tokens)
            run = lookup.tokens[: decision.lookup_k]  # empty unless hybrid
            # Greedy at T > 0 too: its tokens are then judged as lookup's are, one draw for each settled position, so a seed
            # writes plain sampling's answer whatever auto chose (verify_speculative).
            continuation = self.model.continue_after(run, decision.model_k, p_min, None, rng)
            for n_tokens, ms in self.model.passes:  # each pass teaches the draft's cost at its size, its token's choice included
                self.planner.observe_draft_pass(n_tokens, ms)
            draft = Draft.deterministic([*run, *continuation.tokens], sampling)
            self._drafted = len(draft.tokens)
        else:
            draft = Draft.deterministic(lookup.tokens[: decision.k], sampling)  # K = 0 (plain decoding) proposes nothing
        draft.choice = decision  # the loop records it in the statistics
        return draft

    def advance(self, tokens: Sequence[int]) -> None:
        decision = self.last_decision
        self.belief.stepped(self.costs, decision.k if decision.source == self.ngram.name else 0, tokens)
        if self._drafted is not None:
            self.planner.observe_model(decision, self.belief.asked_class, self._drafted, len(tokens) - 1)
        self._drafted = None
        self._shadows = self.planner.settle(self._shadows, tokens, self.belief.copy_effect)
        for drafter in self._drafters():
            drafter.advance(tokens)

    def observe_target(self, row: np.ndarray) -> None:
        self.belief.observe_target(row)

    def forget_requests(self) -> None:
        self.ngram.forget_requests()

    def end(self) -> None:
        """Keep what this generation taught about the costs for the next run."""
        if self.costs_file is not None and not self.costs.fixed:
            cost_cache.save(self.costs_file, self.costs)

    def observe_step(self, n_verified: int, verify_ms: float) -> None:
        """Learn the verify cost."""
        self.planner.observe_verify(n_verified, verify_ms)


def build(sources: DraftSources) -> Drafter:
    # The costs come from the cache when this pair ran on this machine before; else a few target passes time them
    # now. The draft model reads the prompt only if auto picks it: where it never pays, the first token does not
    # wait for a draft prefill.
    costs_file = cost_cache.cache_file(sources.cost_cache_dir, sources.target, sources.draft) if sources.cost_cache_dir else None
    costs = (cost_cache.load(costs_file) if costs_file else None) or calibrate(sources.target, sources.draft)
    model = ModelDrafter(sources.draft, lazy_start=True) if sources.draft is not None else None
    return AutoDrafter(costs, model, costs_file=costs_file)
