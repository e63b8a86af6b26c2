"""auto's policy, for one sequence and for a batch of slots: each slot's drafter and K for the next step.

A slot's draft tokens join a target pass that the other slots' tokens already make, so they cost the marginal cost of
a bigger batch (verify(n + k) - verify(n)); the draft model's passes are shared the same way, one per draft position
for every slot drafting that deep. The planner picks, for the slots asking auto, the choice (plain, each K of lookup
and of the draft model, the best hybrid) that maximises the batch's expected tokens over its expected time, one slot
at a time given the others (coordinate ascent) from plain decoding or from every slot drafting at once, so speculation
that does not pay is not chosen; an ask of the draft model that its own evidence does not vouch for, or of a losing
one, is a try the exploration budget must pay for first. With one slot this is auto's choice for a lone answer.
Acceptance is learned across slots and requests; each slot keeps its own answer's belief (belief.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.auto.acceptance import prefix_curves
from localspec.engine.drafters.auto.agreement import AgreementModel, CopyEffect, ShadowRun, settle
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.catch_up import batch_share
from localspec.engine.drafters.auto.choice import PLAIN, Choice, Source
from localspec.engine.drafters.auto.confidence import ConfidenceClasses
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.auto.hybrid_plan import best_hybrid
from localspec.engine.drafters.auto.model_source import ModelSource
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import ASCENT_ROUNDS, CARRIED_ASKS, CARRIED_RUNS, MODEL_K_MAX, OVERHEAD_DECAY, SWITCH_LEGS


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


def _beats(rate: float, best: float) -> bool:
    """A choice replaces the best so far only by more than rounding: among equals the earlier (plainer) one stays."""
    return rate > best * (1 + 1e-9)


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
        # A lone slot's model pricing within one plan: (catch-up, one-token step, change back to one token) by
        # (source, lookup_k, pending, catch-up share).
        self._drafting_ms: dict[tuple[Source, int, int, float], tuple[float, float, float]] = {}
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
        wanted = Source.MODEL if choice.source is Source.HYBRID else choice.source
        return next(source for source in self.sources if source.source is wanted)

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
        more than the budget; one that has shown it pays is asked on its merits (issue 55: on a GPU's costs, a draft
        that never agreed was asked a dozen times per confidence class, 5-15% of a short answer's time)."""
        self._drafting_ms.clear()  # the costs may have moved since the last plan
        auto = [i for i, options in enumerate(slots) if options.cap > 0]
        if not auto:
            return [PLAIN] * len(slots)
        if len(slots) == 1 and not slots[0].lookup.tokens and not self._model_may_win(slots[0]):
            self.exploration.accrue(self.step_ms([PLAIN], slots))  # as _maybe_explore would, which could find no try to take
            return [PLAIN]
        candidates = {i: self._candidates(slots[i], alone=len(slots) == 1) for i in auto}
        choices, best_rate = self._ascend(slots, auto, candidates)
        if any(choice.model_k for choice in choices):
            without, without_rate = self._ascend(slots, auto, {i: [c for c in found if not c.model_k] for i, found in candidates.items()})
            vouched_rate = sum(choice.vouched_tokens + options.forced for choice, options in zip(choices, slots)) / self.step_ms(
                choices, slots, spread=True)
            if _beats(vouched_rate, without_rate):
                return choices
            worst_tokens = sum((1.0 if choice.model_k else choice.predicted) + options.forced for choice, options in zip(choices, slots))
            if self.exploration.afford(self.step_ms(choices, slots) - worst_tokens / without_rate):
                return choices
            choices, best_rate = without, without_rate
        return self._maybe_explore(choices, slots, auto, best_rate)

    def _model_may_win(self, options: SlotOptions) -> bool:
        """Whether any model source could beat plain decoding for a lone slot, every token it drafts accepted, its step
        priced from below (its verify, a one-token pass per token, no change of size). Where none can, a step without a
        lookup run is plain decoding, found without pricing every K: on a 2-core CPU, auto's steps ran 0.55 ms of Python
        beside plain's 0.28 on answers where it chose plain throughout, 1.6% of their time."""
        forced = options.forced
        plain = (1 + forced) / self._lone_step_ms(PLAIN, options, spread=True)
        for source in self.sources:
            pending = max(1, options.pending_for(source.source))
            per_token = min(source.costs.cost(1), source.costs.cost(pending))
            for k in range(1, min(options.cap, source.k_max) + 1):
                if (1 + forced + k) / (self.overhead_ms + self.costs.verify(forced + k + 1) + k * per_token) > plain:
                    return True
        return False

    def _ascend(self, slots: Sequence[SlotOptions], auto: list[int], candidates: dict[int, list[Choice]]) -> tuple[list[Choice], float]:
        """The best choices among the candidates and their rate: one slot at a time given the others (coordinate ascent)
        from plain decoding, or from every slot drafting with the model at once (_together), then the pass filled with
        lookup tokens (_fill)."""
        choices = [PLAIN] * len(slots)
        best_rate = self._rate(choices, slots)
        if len(slots) > 1:
            together = self._together(slots, auto, candidates)
            together_rate = self._rate(together, slots)
            if together_rate > best_rate:
                choices, best_rate = together, together_rate
        # A lone slot's first round is already the best of its candidates, and no other slot's tokens share its pass (_fill).
        alone = len(slots) == 1
        for _ in range(1 if alone else ASCENT_ROUNDS):
            changed = False
            for i in auto:
                for candidate in candidates[i]:
                    if alone:
                        rate = (candidate.predicted + slots[0].forced) / self._lone_step_ms(candidate, slots[0], spread=True)
                        trial = [candidate]
                    else:
                        trial = [*choices[:i], candidate, *choices[i + 1 :]]
                        rate = self._rate(trial, slots)
                    if _beats(rate, best_rate):
                        choices, best_rate, changed = trial, rate, True
            if not changed:
                break
        if not alone:
            choices, best_rate = self._fill(choices, slots, auto, best_rate)
        return choices, best_rate

    def _together(self, slots: Sequence[SlotOptions], auto: list[int], candidates: dict[int, list[Choice]]) -> list[Choice]:
        """The other joint move the ascent cannot make: every slot drafting with the model at once, each at the choice
        that is best for it as a step of its own. Draft passes are shared by the slots drafting that deep, so one slot's
        draft alone loses beside the others' lookup runs where all of them drafting wins (four slots on a GPU's costs
        stayed on lookup at 0.8x the draft model's rate)."""
        together = [PLAIN] * len(slots)
        for i in auto:
            drafting = [candidate for candidate in candidates[i] if candidate.model_k]
            if drafting:
                alone = [slots[i]]
                together[i] = max(drafting, key=lambda candidate: self._rate([candidate], alone))
        return together

    def _fill(self, choices: list[Choice], slots: Sequence[SlotOptions], auto: list[int], best_rate: float) -> tuple[list[Choice], float]:
        """The joint move the ascent cannot make: lookup tokens for several slots at once, filling the pass to a size
        that costs little more. On a CPU whose passes are lumpy (the real Q4_K_M target: 4 tokens 99 ms, 7 tokens 157,
        16 tokens 223), one slot's 3 lookup tokens lose alone and four slots' win together, so the ascent, one slot at
        a time from plain, stays plain there. The best tokens to add are each slot's next lookup token with
        the most expected gain (a run's gains fall with depth), taken in that order; each count is weighed whole."""
        gains: list[tuple[float, int]] = []  # (expected tokens gained, slot) for every lookup token a slot could add
        curves: dict[int, list[float]] = {}
        for i in auto:
            options, choice = slots[i], choices[i]
            if choice.source not in (Source.NONE, Source.NGRAM):
                continue  # a draft model's plan stands as the ascent chose it
            expected = curves[i] = self._lookup_curves(options)[0]
            gains += [(expected[k] - expected[k - 1], i) for k in range(choice.k + 1, len(expected))]
        if not gains:
            return choices, best_rate
        gains.sort(key=lambda gain: -gain[0])
        n_verify = sum(choice.k + 1 + options.forced for choice, options in zip(choices, slots))
        predicted = sum(choice.predicted + options.forced for choice, options in zip(choices, slots))
        step_ms = self.step_ms(choices, slots, spread=True)
        best_m, gained = 0, 0.0
        for m, (gain, _) in enumerate(gains, start=1):
            gained += gain
            rate = (predicted + gained) / (step_ms + self.costs.verify(n_verify + m) - self.costs.verify(n_verify))
            if _beats(rate, best_rate):
                best_m, best_rate = m, rate
        if not best_m:
            return choices, best_rate
        ks = {i: choices[i].k for i in curves}
        for _, i in gains[:best_m]:
            ks[i] += 1
        filled = list(choices)
        for i, k in ks.items():
            filled[i] = Choice(Source.NGRAM, k, 1 + curves[i][k]) if k else PLAIN
        return filled, best_rate

    def _model_curve(self, options: SlotOptions, k: int, source: ModelSource) -> list[float]:
        """A model's expected accepted tokens among its first 0..k, in the class of the slot's confidence."""
        return source.acceptance[options.belief.confidence.class_index].prefix_curves(k)[0]

    def _candidates(self, options: SlotOptions, alone: bool = False) -> list[Choice]:
        """Plain, each K of lookup and of the draft model, and the hybrid (j, m) that is best as a step of its own (one
        candidate, not all j x m: the ascent weighs it in the batch like the others); `alone`, a lone slot's: of lookup,
        only the K its ascent would keep (_lone_lookup)."""
        found = [PLAIN]
        lookup_expected, lookup_survive = self._lookup_curves(options)
        n_lookup = len(lookup_expected) - 1
        if alone:
            found += self._lone_lookup(lookup_expected, options.forced)
        else:
            found += [Choice(Source.NGRAM, k, 1 + lookup_expected[k]) for k in range(1, n_lookup + 1)]
        for source in self.sources:
            if options.forced and not source.continues_lookup:
                continue
            model_k = min(options.cap, source.k_max)
            model_expected = self._model_curve(options, model_k, source)
            vouched = source.acceptance.vouched(options.belief.confidence.class_index, model_k)
            found += [Choice(source.source, k, 1 + model_expected[k], vouched=1 + vouched[k]) for k in range(1, len(model_expected))]
            if not source.continues_lookup:
                continue
            # The hybrid candidate is found as auto finds it; the ascent then weighs it in the batch like the others.
            hybrid = best_hybrid(self.costs, source.costs, max(1, options.pending_for(source.source)), options.belief.resume_runs.expected,
                                 n_lookup, options.cap, lookup_expected, lookup_survive, model_expected)
            if hybrid is not None:
                j, m = hybrid.lookup_k, hybrid.model_k
                found.append(Choice(Source.HYBRID, j + m, hybrid.tokens, lookup_k=j,
                                    vouched=1 + lookup_expected[j] + lookup_survive[j] * vouched[m]))
        return found

    def _lone_lookup(self, expected: list[float], forced: int) -> list[Choice]:
        """The lookup K a lone slot's ascent keeps, found by the ascent's own comparisons in its order and priced as
        _lone_step_ms prices it, without a Choice for every K (a run of 32 tokens made 32 of them every step)."""
        best_rate, best_k = (1 + forced) / self._target_step_ms(1 + forced), 0  # plain decoding's, after the forced tokens
        for k in range(1, len(expected)):
            rate = (1 + forced + expected[k]) / self._target_step_ms(forced + k + 1)
            if _beats(rate, best_rate):
                best_rate, best_k = rate, k
        return [Choice(Source.NGRAM, best_k, 1 + expected[best_k])] if best_k else []

    def _lookup_curves(self, options: SlotOptions) -> tuple[list[float], list[float]]:
        """prefix_curves of the slot's lookup run, as far as its cap (and its answer's budget for thin bets) lets it draft
        (index k: its first k tokens)."""
        lookup, belief = options.lookup, options.belief
        k = belief.lookup_cap(self.costs, lookup.match_length, min(options.cap, len(lookup.tokens)))
        return self.lookup_acceptance.prefix_curves(lookup.match_length, k, belief.confidence.unsure, lookup.own, belief.copy_effect,
                                                    belief.edit_points.judge(lookup.tokens[:k], lookup.own))

    def _rate(self, choices: Sequence[Choice], slots: Sequence[SlotOptions]) -> float:
        return sum(choice.predicted + options.forced for choice, options in zip(choices, slots)) / self.step_ms(choices, slots, spread=True)

    def step_ms(self, choices: Sequence[Choice], slots: Sequence[SlotOptions], spread: bool = False) -> float:
        """The expected time of the step the choices make: the drafting passes, one target pass, the step's overhead.
        `spread`: as choices weigh it, each slot's catch-up beyond its first tokens spread over the asks a resume buys
        there (catch_up.catch_up_price, for a lone slot exactly that)."""
        if len(choices) == 1:
            return self._lone_step_ms(choices[0], slots[0], spread)
        n_verify = sum(choice.k + 1 + options.forced for choice, options in zip(choices, slots))
        ms = self._target_step_ms(n_verify)
        for source in self.sources:
            drafting = [(choice, options) for choice, options in zip(choices, slots) if choice.model_k and self.source_of(choice) is source]
            if not drafting:
                continue
            # how many slots draft each position (reach[d]: position d, from 0)
            reach = [sum(1 for choice, _ in drafting if choice.model_k > depth) for depth in range(max(c.model_k for c, _ in drafting))]
            spreads = [options.belief.resume_runs.expected for _, options in drafting]
            if source.chained_heads:
                queued = [options.pending_for(source.source) for _, options in drafting]
                ms += source.chained_ms(sum(queued), reach, batch_share(queued, spreads) if spread else 1.0)
                continue
            # The first pass reads, for each drafting slot, what it has not seen (at least its last token), the text its
            # grammar forced and a hybrid's lookup tokens; it gives each one's first draft token.
            first = source.costs.cost(sum(1 + options.forced + choice.lookup_k for choice, options in drafting))
            pending = [max(1, options.pending_for(source.source)) for _, options in drafting]
            n_whole = sum(n + options.forced + choice.lookup_k for n, (choice, options) in zip(pending, drafting))
            whole = source.costs.cost(n_whole)
            share = batch_share([n - 1 for n in pending], spreads) if spread else 1.0
            ms += first + (whole - first) * share
            deeper = reach[1:]
            ms += sum(source.costs.cost(n) for n in deeper) + source.switches([n_whole, *deeper])
        return ms

    def _lone_step_ms(self, choice: Choice, options: SlotOptions, spread: bool) -> float:
        """step_ms for a batch of one slot, in a few operations: auto prices a dozen candidates every step, and those of
        the draft model share their catch-up (kept for the plan in _drafting_ms)."""
        ms = self._target_step_ms(choice.k + 1 + options.forced)
        if choice.model_k:
            source = self.source_of(choice)
            pending = options.pending_for(source.source)
            share = 1 / options.belief.resume_runs.expected if spread and pending > 1 else 1.0
            if source.chained_heads:
                return ms + source.chained_ms(pending, [1] * choice.model_k, share)
            read = options.forced + choice.lookup_k  # what the first pass reads past the slot's pending tokens
            key = (source.source, read, pending, share)
            if key not in self._drafting_ms:
                first = source.costs.cost(1 + read)
                n_whole = max(1, pending) + read
                whole = source.costs.cost(n_whole)
                # the catch-up's change of size, and the change back to one token for the rest
                switches = source.switches([n_whole]), source.switches([1], last=n_whole)
                self._drafting_ms[key] = (first + (whole - first) * share + switches[0], source.costs.cost(1), switches[1])
            catch_up, per_token, back = self._drafting_ms[key]
            ms += catch_up + (choice.model_k - 1) * per_token + (back if choice.model_k > 1 else 0.0)
        return ms

    def _target_step_ms(self, n_verify: int) -> float:
        """A step's time besides its drafting passes: its overhead, a target pass of n_verify tokens and its change of size."""
        return self.overhead_ms + self.costs.verify(n_verify) + SWITCH_LEGS * self.costs.target.switch(self.last_verify, n_verify)

    def _maybe_explore(self, choices: list[Choice], slots: Sequence[SlotOptions], auto: list[int], best_rate: float) -> list[Choice]:
        """Now and then, let the draft model draft one slot when it is losing, so that it can win back (it costs a
        pass to judge, unlike lookup), as auto tries it: the cheapest K that would win for the slot, as a step of its
        own, if accepted as often as its target has lately been sure, once the exploration budget pays for what the try
        could lose in the batch: every drafting cost it incurs (its catch-up whole, its passes, the longer verify) if none
        of its tokens is accepted. Judged against the whole batch's rate, one slot's hoped-for draft never won beside
        three slots' lookup runs, and four slots on a GPU's costs never learned a draft that ran them 1.3x faster."""
        if not self.sources or any(c.model_k for c in choices):
            return choices
        self.exploration.accrue(self.step_ms(choices, slots))
        if self.exploration.spendable_ms < min(source.costs.cost(1) for source in self.sources):  # no try loses less than a draft pass
            return choices
        for i in auto:
            hoped = prefix_curves([slots[i].belief.confidence.hope] * MODEL_K_MAX)[0]
            alone = [slots[i]]
            own_rate = self._rate([choices[i]], alone)
            for source in self.sources:  # the cheapest K of the first model that would win for the slot
                expected = self._model_curve(slots[i], source.k_max, source)
                for k in range(1, min(slots[i].cap, source.k_max) + 1):
                    if self._rate([Choice(source.source, k, 1 + hoped[k])], alone) <= own_rate:
                        continue
                    trial = [*choices[:i], Choice(source.source, k, 1 + expected[k]), *choices[i + 1 :]]
                    worst_tokens = sum(c.predicted + o.forced for c, o in zip(choices, slots)) - choices[i].predicted + 1  # the try's slot gets one
                    worst_loss = self.step_ms(trial, slots) - worst_tokens / best_rate
                    return trial if self.exploration.afford(worst_loss) else choices
        return choices

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
