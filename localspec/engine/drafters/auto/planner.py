"""auto's policy, for one sequence and for a batch of slots: each slot's drafter and K for the next step.

The planner keeps what the choices are learned from and makes them: each slot's candidates (candidates.py), priced as
a step of the batch (step_price.py), searched for the batch's best rate (search.py), so speculation that does not pay
is not chosen; an ask of a model that its own evidence does not vouch for, or of a losing one, is a try the
exploration budget must pay for first. With one slot this is auto's choice for a lone answer. Acceptance is learned
across slots and requests; each slot keeps its own answer's belief (belief.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.engine.drafters.auto.agreement import AgreementModel, CopyEffect, ShadowRun, settle
from localspec.engine.drafters.auto.candidates import SlotOptions, candidates
from localspec.engine.drafters.auto.choice import PLAIN, Choice, Source
from localspec.engine.drafters.auto.confidence import ConfidenceClasses
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.auto.model_source import ModelSource
from localspec.engine.drafters.auto.search import ascend, beats, explore
from localspec.engine.drafters.auto.step_price import StepPrice, source_of
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import CARRIED_ASKS, CARRIED_RUNS, OVERHEAD_DECAY

__all__ = ["PLAIN", "Choice", "Planner", "SlotOptions"]


class Planner:
    """auto's choices and what they are learned from: the costs, lookup's and the draft model's acceptance, the
    exploration budget, the step's overhead (kept across requests)."""

    def __init__(self, costs: CostTable, has_draft_model: bool, model_source: Source = Source.MODEL, head: Source | None = None,
                 chained_heads: Mapping[Source, int] | None = None) -> None:
        """`model_source`: what drafts auto's model tokens, the draft model or a head (MTP, EAGLE-3; a head cannot
        continue a lookup run: it would need the target's rows for its tokens, so it makes no hybrid), priced by
        costs.draft. `head`: a head beside the draft model, priced by costs.head: auto then chooses between them.
        `chained_heads`: the sources that are chained heads, and how many (priced pass by pass: ModelSource.chained_ms)."""
        self.costs = costs
        self.sources: list[ModelSource] = []
        chained = chained_heads or {}
        if has_draft_model and costs.draft is not None and costs.draft.ms:
            self.sources.append(ModelSource(model_source, costs.draft, chained_heads=chained.get(model_source)))
        if head is not None and costs.head is not None and costs.head.ms:
            self.sources.append(ModelSource(head, costs.head, chained_heads=chained.get(head)))
        self.lookup_acceptance = AgreementModel()
        self.overhead_ms = 0.0  # a step's time outside llama_decode (Python, sampling): paid whatever is drafted
        self.exploration = ExplorationBudget()
        # The size of the last target pass: a pass of another size pays for a new graph (pass_costs.py).
        self.last_verify: int | None = None

    @property
    def has_draft_model(self) -> bool:  # any model drafts auto's model tokens (the draft model, or a head)
        return bool(self.sources)

    @property
    def model_source(self) -> Source:  # the first model source: the draft model where one is loaded
        return self.sources[0].source if self.sources else Source.MODEL

    @property
    def draft_acceptance(self) -> ConfidenceClasses:  # the first model source's (a fresh table where there is none)
        return self.sources[0].acceptance if self.sources else ConfidenceClasses()

    def source_of(self, choice: Choice) -> ModelSource:
        """The model that drafts `choice`'s model tokens (a hybrid's: the draft model's)."""
        return source_of(self.sources, choice)

    def start_answer(self) -> None:
        """A request starts: what earlier answers taught of each model (CARRIED_ASKS) and of lookup's runs (CARRIED_RUNS)
        stays a belief this one soon outweighs; lookup's guesses past an edit, and what it earns to explore, are its own."""
        for source in self.sources:
            source.acceptance.carry_over(CARRIED_ASKS)
        self.lookup_acceptance.carry_over(CARRIED_RUNS)
        self.lookup_acceptance.forget_guesses()
        self.exploration.new_answer()

    # --- choosing ---------------------------------------------------------------------

    def plan(self, slots: Sequence[SlotOptions]) -> list[Choice]:
        """A choice per slot. Prompt chunks that ride in the same pass are left out of the reckoning: they make extra draft
        tokens look nearly free in a long pass, and a pass lengthened that way would then let bigger chunks in.

        A plan that asks the draft model where its evidence alone (no prior) does not vouch for it beating the best
        plan without it is a bet on the priors, so it is a try: taken only where the exploration budget pays for what
        it loses if none of the draft's tokens is accepted. A draft never asked, or one that never agrees, costs no
        more than the budget; one that has shown it pays is asked on its merits."""
        # The slots that may draft and have something to draft: a lookup run, or a model to ask. Where none has, the plan
        # reads nothing that could make it other than plain decoding.
        asking = [i for i, options in enumerate(slots) if options.cap > 0 and (options.lookup.tokens or self.sources)]
        if not asking:
            return [PLAIN] * len(slots)
        price = self.price()
        if len(slots) == 1 and not slots[0].lookup.tokens and not self._model_may_win(slots[0]):
            self.exploration.accrue(price.step_ms([PLAIN], slots))  # as explore would, which could find no try to take
            return [PLAIN]
        found = {i: candidates(slots[i], self.sources, self.lookup_acceptance, self.costs) for i in asking}
        choices, best_rate = ascend(price, slots, asking, found)
        if any(choice.model_k for choice in choices):
            without, without_rate = ascend(price, slots, asking, {i: offered.without_models() for i, offered in found.items()})
            vouched_rate = sum(choice.vouched_tokens + options.forced for choice, options in zip(choices, slots)) / price.step_ms(
                choices, slots, spread=True)
            if beats(vouched_rate, without_rate):
                return choices
            worst_tokens = sum((1.0 if choice.model_k else choice.predicted) + options.forced for choice, options in zip(choices, slots))
            if self.exploration.afford(price.step_ms(choices, slots) - worst_tokens / without_rate):
                return choices
            choices, best_rate = without, without_rate
        return explore(price, self.exploration, choices, slots, asking, best_rate)

    def _model_may_win(self, options: SlotOptions) -> bool:
        """The planner's one fast path: whether any model source could beat plain decoding for a lone slot, every token
        it drafts accepted, its step priced from below (its verify, a one-token pass per token, no change of size).
        Where none can, a lone step without a lookup run is plain decoding, found without pricing every K. It holds for
        a lone slot only: in a batch a model's passes are shared and its tokens ride in a longer pass."""
        forced = options.forced
        price = self.price()
        plain = (1 + forced) / price.step_ms([PLAIN], [options], spread=True)
        for source in self.sources:
            pending = max(1, options.pending_for(source.source))
            per_token = min(source.costs.cost(1), source.costs.cost(pending))
            for k in range(1, min(options.cap, source.k_max) + 1):
                if (1 + forced + k) / (self.overhead_ms + self.costs.verify(forced + k + 1) + k * per_token) > plain:
                    return True
        return False

    def price(self) -> StepPrice:
        """Steps priced at the costs as they stand (a plan's: they move as passes teach them)."""
        return StepPrice(self.costs, self.sources, self.overhead_ms, self.last_verify)

    def step_ms(self, choices: Sequence[Choice], slots: Sequence[SlotOptions], spread: bool = False) -> float:
        """The expected time of the step the choices make (StepPrice.step_ms)."""
        return self.price().step_ms(choices, slots, spread)

    # --- learning -----------------------------------------------------------------------

    def watch_lookup(self, shadows: list[ShadowRun], lookup: Lookup, unsure: bool = False) -> None:
        """A lookup run is judged by the text that follows, whether it was drafted or not (it costs nothing to watch);
        `unsure`: found where the slot's target had lately been unsure."""
        if lookup.tokens:
            shadows.append(ShadowRun(lookup.match_length, list(lookup.tokens), unsure, lookup.own))

    def settle(self, shadows: list[ShadowRun], tokens: Sequence[int], effect: CopyEffect) -> list[ShadowRun]:
        """The slot's new settled tokens judge its waiting lookup runs (and teach its answer's `effect`); those still
        undecided are returned."""
        return settle(shadows, tokens, self.lookup_acceptance, effect)

    def observe_model(self, choice: Choice, asked_class: int, n_drafted: int, n_accepted: int) -> None:
        """What the draft model's tokens showed, in the confidence class it was asked in: a hybrid's only where the target
        accepted the whole lookup part before them (else they were never judged); the lookup part teaches its match
        class through the shadows, as any run does."""
        if n_accepted >= choice.lookup_k:
            self.source_of(choice).acceptance[asked_class].observe_asked(n_drafted - choice.lookup_k, n_accepted - choice.lookup_k)

    def observe_verify(self, n_tokens: int, ms: float) -> None:
        self.costs.observe_verify(n_tokens, ms, switched=self.last_verify not in (None, n_tokens))
        self.last_verify = n_tokens

    def observe_overhead(self, ms: float) -> None:
        """A step's time outside its passes; not learned where the costs are given (they leave it out, as a ledger does)."""
        if self.costs.fixed:
            return
        self.overhead_ms = ms if not self.overhead_ms else OVERHEAD_DECAY * self.overhead_ms + (1 - OVERHEAD_DECAY) * ms

    def observe_draft_pass(self, n_tokens: int, ms: float, source: Source | None = None) -> None:
        """A pass of n tokens of a model source (a catch-up, or one token for each of n slots; None: the first source)
        teaches its cost at that size."""
        model = next((m for m in self.sources if m.source is source), None) if source is not None else self.sources[0]
        if model is None:
            return
        self.costs.observe_draft(model.costs, n_tokens, ms, switched=model.last_pass not in (None, n_tokens))
        model.last_pass = n_tokens
