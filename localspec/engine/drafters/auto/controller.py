"""The adaptive controller (`--drafter auto`): per step, the drafter and K with the most tokens per second.

For each option (none, prompt lookup, the draft model, hybrid: lookup's first tokens then the model) it predicts the
tokens a step emits from the acceptance learned at each draft position, and the step's cost from this machine's
measured pass costs, and takes the best; K = 0 is plain decoding, so speculation that does not pay is not chosen.
Lookup is judged every step for free from the text that follows; the draft model only by asking it, so it is tried
while losing as a budget allows (exploration.py), and its acceptance is learned per class of the target's confidence
(confidence.py). Its lookup remembers earlier requests (LookupMemory), so an editor's next request can copy them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.engine.drafters.auto import cost_cache
from localspec.engine.drafters.auto.acceptance import AcceptanceModel, prefix_curves
from localspec.engine.drafters.auto.agreement import AgreementModel, ShadowRun, settle
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.catch_up import ResumeRuns, catch_up_price
from localspec.engine.drafters.auto.choice import HYBRID, Choice
from localspec.engine.drafters.auto.confidence import ConfidenceClasses, TargetConfidence
from localspec.engine.drafters.auto.costs import CostTable, calibrate
from localspec.engine.drafters.auto.exploration import ExplorationBudget
from localspec.engine.drafters.base import Draft, Drafter, DraftSources
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookup, LookupMemory, NgramDrafter
from localspec.engine.sampling import SamplingParams
from localspec.engine.tuning import CARRIED_ASKS, HYBRID_LOOKUP_MAX, MODEL_K_MAX


@dataclass(frozen=True)
class HybridPlan:
    lookup_k: int  # the lookup run's first tokens...
    model_k: int  # ...then the draft model's, from their end
    tokens: float  # 1 + expected accepted
    rate: float  # tokens per ms, priced as a step of its own


def best_hybrid(costs: CostTable, pending: int, spread: float, n_lookup: int, k_cap: int, lookup_expected: list[float],
                lookup_survive: list[float], model_expected: list[float]) -> HybridPlan | None:
    """The best (j, m) of the first j <= n_lookup lookup tokens then m draft-model tokens under the cap: the draft
    reads its `pending` tokens and the j in one catch-up batch (catch_up_price, spread over `spread` asks), takes m - 1
    one-token steps, and the target verifies j + m + 1; expected, the run's accepted tokens plus, when all j survive,
    the model's. None without a run."""
    best: HybridPlan | None = None
    for j in range(1, min(n_lookup, k_cap - 1, HYBRID_LOOKUP_MAX) + 1):
        catch_up = catch_up_price(costs, pending, spread, j)
        for m in range(1, min(MODEL_K_MAX, k_cap - j) + 1):
            tokens = 1 + lookup_expected[j] + lookup_survive[j] * model_expected[m]
            rate = tokens / (catch_up + (m - 1) * costs.draft_ms_per_token + costs.verify(j + m + 1))
            if best is None or rate > best.rate:
                best = HybridPlan(j, m, tokens, rate)
    return best


class AutoDrafter(Drafter):
    """Chooses, each step, between plain decoding, prompt lookup and the draft model, and how far to draft."""

    name = "auto"

    def __init__(self, costs: CostTable, model: ModelDrafter | None = None, ngram: NgramDrafter | None = None,
                 costs_file: Path | None = None) -> None:
        self.costs = costs
        self.costs_file = costs_file  # where the learned costs are kept between runs (None: not kept)
        self.model = model
        self.models = model.models if model is not None else ()
        self.ngram = ngram or NgramDrafter(memory=LookupMemory())
        self.lookup_acceptance = AgreementModel()
        self.draft_acceptance = ConfidenceClasses()
        self.belief = SequenceBelief()  # the answer's own: the target's confidence, resumes, the class last asked in
        self.last_decision = Choice("none", 0, 1.0)
        self._shadows: list[ShadowRun] = []
        self._model_drafted: int | None = None  # tokens the draft model proposed this step (None: it was not asked)
        self._model_after = 0  # lookup tokens before them (a hybrid step): the model is judged only if all survive
        self.exploration = ExplorationBudget()  # kept across requests, as the acceptance is

    @property
    def confidence(self) -> TargetConfidence:
        return self.belief.confidence

    @property
    def resume_runs(self) -> ResumeRuns:
        """What a catch-up is spread over (catch_up.py); kept across requests."""
        return self.belief.resume_runs

    @property
    def model_acceptance(self) -> AcceptanceModel:
        """The draft model's acceptance in the target's present confidence class."""
        return self.draft_acceptance[self.confidence.class_index]

    def _drafters(self) -> list[Drafter]:
        return [d for d in (self.ngram, self.model) if d is not None]

    def start(self, prompt: Sequence[int]) -> None:
        for drafter in self._drafters():
            drafter.start(prompt)
        self._shadows = []
        self.lookup_acceptance.forget_guesses()
        self.draft_acceptance.carry_over(CARRIED_ASKS)
        self.belief.new_answer()

    def decide(self, k_cap: int, lookup: Lookup) -> Choice:
        plain = Choice("none", 0, 1.0)
        options: list[tuple[Choice, float]] = [(plain, 1.0 / self.costs.verify(1))]
        n_lookup = self.belief.lookup_cap(self.costs, lookup.match_length, min(k_cap, len(lookup.tokens)))
        lookup_expected, lookup_survive = self.lookup_acceptance.prefix_curves(
            lookup.match_length, n_lookup, self.confidence.unsure, lookup.own, self.belief.copy_effect,
            self.belief.edit_points.judge(lookup.tokens[:n_lookup]))
        for k in range(1, n_lookup + 1):
            tokens = 1 + lookup_expected[k]
            options.append((Choice(self.ngram.name, k, tokens), tokens / self.costs.verify(k + 1)))
        model_tries: list[tuple[Choice, float, float]] = []  # each with its price (catch-up spread) and its cost now
        if self.model is not None and self.costs.has_draft:
            model_expected, _ = self.model_acceptance.prefix_curves(MODEL_K_MAX)
            # The draft first decodes the accepted text it has not seen, in one batch that also gives its first token
            # (after a drafting step, just the target's own token); each further token is a one-token step.
            pending, spread = self.model.pending_tokens, self.resume_runs.expected
            priced, now = catch_up_price(self.costs, pending, spread), self.costs.draft_batch(max(1, pending))
            for k in range(1, min(k_cap, MODEL_K_MAX) + 1):
                rest = (k - 1) * self.costs.draft_ms_per_token + self.costs.verify(k + 1)
                decision = Choice(self.model.name, k, 1 + model_expected[k])
                options.append((decision, decision.predicted / (priced + rest)))
                model_tries.append((decision, priced + rest, now + rest))
            hybrid = best_hybrid(self.costs, pending, spread, n_lookup, k_cap, lookup_expected, lookup_survive, model_expected)
            if hybrid is not None:
                options.append((Choice(HYBRID, hybrid.lookup_k + hybrid.model_k, hybrid.tokens, lookup_k=hybrid.lookup_k), hybrid.rate))
        best, best_rate = max(options, key=lambda option: option[1])
        if self.model is not None and best.source in (self.model.name, HYBRID):
            return best
        self.exploration.accrue(best.predicted / best_rate)
        # Exploration: the cheapest try of the draft model that would win accepted as often as the target has lately been
        # sure (confidence.py), when the budget pays for what it is expected to lose. One that cannot win even then
        # (a draft too slow for its target, or text too unsure) is never tried. Hope is judged at the draft's price, as it
        # would win once resumed; the budget pays what the try costs now, the whole catch-up (a try that loses stops, and
        # nothing follows to share it).
        hoped = prefix_curves([self.confidence.hope] * MODEL_K_MAX)[0]
        hopeful = [(decision, now) for decision, price, now in model_tries if (1 + hoped[decision.k]) / price > best_rate]
        if hopeful:
            decision, now = min(hopeful, key=lambda try_: try_[0].k)
            if self.exploration.afford(now - decision.predicted / best_rate):
                return decision
        return best

    def propose(self, k: int, p_min: float, sampling: SamplingParams | None, rng: np.random.Generator) -> Draft:
        lookup = self.ngram.lookup(k)
        self.belief.looked(lookup)
        if lookup.tokens:
            self._shadows.append(ShadowRun(lookup.match_length, lookup.tokens, self.confidence.unsure, lookup.own))
        decision = self.decide(k, lookup)
        self.last_decision = decision
        self._model_drafted, self._model_after = None, 0
        if self.model is not None and decision.source in (self.model.name, HYBRID):
            self.belief.asked(self.model.pending_tokens)
            run = lookup.tokens[: decision.lookup_k]  # empty unless hybrid
            # Greedy at T > 0 too: its tokens are then judged as lookup's are, one draw for each settled position, so a seed
            # writes plain sampling's answer whatever auto chose (verify_speculative).
            continuation = self.model.continue_after(run, decision.k - len(run), p_min, None, rng)
            for n_tokens, ms in self.model.passes:  # each pass teaches the draft's cost at its size, its token's choice included
                self.costs.observe_draft(n_tokens, ms)
            self._model_drafted, self._model_after = len(continuation.tokens), len(run)
            draft = Draft.deterministic([*run, *continuation.tokens], sampling)
        else:
            tokens = lookup.tokens[: decision.k]  # K = 0 (plain decoding) proposes nothing
            draft = Draft.deterministic(tokens, sampling)
        draft.choice = decision  # the loop records it in the statistics
        return draft

    def advance(self, tokens: Sequence[int]) -> None:
        accepted = len(tokens) - 1
        self.belief.stepped(self.costs, self.last_decision.k if self.last_decision.source == self.ngram.name else 0, tokens)
        if self._model_drafted is not None and accepted >= self._model_after:
            self.draft_acceptance[self.belief.asked_class].observe_asked(self._model_drafted, accepted - self._model_after)
        self._model_drafted, self._model_after = None, 0
        self._shadows = settle(self._shadows, tokens, self.lookup_acceptance, self.belief.copy_effect)
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
        self.costs.observe_verify(n_verified, verify_ms)


def build(sources: DraftSources) -> Drafter:
    # The costs come from the cache when this pair ran on this machine before; else a few target passes time them
    # now. The draft model reads the prompt only if auto picks it: where it never pays, the first token does not
    # wait for a draft prefill.
    costs_file = cost_cache.cache_file(sources.cost_cache_dir, sources.target, sources.draft) if sources.cost_cache_dir else None
    costs = (cost_cache.load(costs_file) if costs_file else None) or calibrate(sources.target, sources.draft)
    model = ModelDrafter(sources.draft, lazy_start=True) if sources.draft is not None else None
    return AutoDrafter(costs, model, costs_file=costs_file)
