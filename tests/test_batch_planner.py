"""The batch planner's choices, on cost tables given outright: drafting where the batch has room, none where it is full."""

from __future__ import annotations

import pytest

from localspec.engine.batch.prefill import prefill_budget
from localspec.engine.drafters.auto.agreement import ShadowRun
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.choice import Source
from localspec.engine.drafters.auto.planner import PLAIN, Choice, Planner, SlotOptions
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable, PassCosts
from localspec.engine.tuning import CLASS_EDGES, EXPLORE_SHARE, MIN_PREFILL_CHUNK
from tests.drafting import CPU_LIKE, GPU_LIKE, asked_before

# A target whose passes cost nearly the same up to 4 tokens, then grow with every token (a GPU, or a Q8 target on a CPU).
CHEAP_TO_FOUR = {1: 10.0, 2: 11.0, 4: 13.0, 8: 40.0, 16: 80.0, 32: 160.0, 64: 320.0}
COPY = Lookup(list(range(100, 108)), match_length=8)  # an 8-token lookup run with a good match behind it
# The real Q4_K_M target's passes on this project's 2-core CPU (ms, measured): 16 tokens cost less than 14 or 18.
LUMPY_CPU = {1: 68.0, 2: 92.0, 3: 96.0, 4: 98.5, 6: 140.0, 8: 174.0, 12: 226.0, 16: 223.0, 24: 351.0, 32: 406.0, 64: 716.0}


def planner(verify: dict[int, float], draft_ms: float | None = None) -> Planner:
    return Planner(CostTable.given(verify, draft_ms), has_draft_model=draft_ms is not None)


def test_a_lone_slot_drafts_where_the_pass_has_room():
    [choice] = planner(CHEAP_TO_FOUR).plan([SlotOptions(8, COPY, 1)])
    assert choice.source is Source.NGRAM and choice.k == 3  # up to the size a pass costs little more for


def test_a_full_batch_stops_drafting():
    choices = planner(CHEAP_TO_FOUR).plan([SlotOptions(8, COPY, 1)] * 8)
    assert [choice.k for choice in choices] == [0] * 8  # eight slots fill the cheap part of the pass: drafting would cost more than it saves


def test_draft_tokens_are_priced_at_the_marginal_cost_of_the_batch():
    """Two slots: the pass of 2 is paid anyway, so drafting fills it up to 4 tokens (not up to 4 per slot)."""
    choices = planner(CHEAP_TO_FOUR).plan([SlotOptions(8, COPY, 1)] * 2)
    assert sum(choice.k + 1 for choice in choices) == 4 and all(choice.source in (Source.NGRAM, Source.NONE) for choice in choices)


def test_slots_draft_together_where_a_pass_is_cheap_only_when_filled():
    """Four slots with a good lookup run each, on a CPU where 7 tokens cost 157 ms and 16 cost 223: one slot's 3 tokens
    lose alone, so a planner that moves one slot at a time stays plain; all four's together fill the pass to 16."""
    choices = planner(LUMPY_CPU).plan([SlotOptions(8, COPY, 1)] * 4)
    assert sum(choice.k + 1 for choice in choices) == 16 and {choice.source for choice in choices} == {Source.NGRAM}
    alone = planner(LUMPY_CPU).plan([SlotOptions(8, COPY, 1)] + [SlotOptions(8, Lookup(), 1)] * 3)
    assert [choice.k for choice in alone] == [0] * 4  # one run cannot fill the pass: 4 + 3 tokens cost more than they bring


def test_the_draft_model_is_chosen_only_where_its_passes_pay():
    no_lookup = [SlotOptions(8, Lookup(), 1)]
    cheap_draft = planner(CHEAP_TO_FOUR, draft_ms=0.5)
    asked_before(cheap_draft)
    [cheap] = cheap_draft.plan(no_lookup)
    assert cheap.source is Source.MODEL and cheap.k >= 1
    dear_draft = planner(CHEAP_TO_FOUR, draft_ms=20.0)  # a draft pass twice the target's own: never worth it
    asked_before(dear_draft)
    [dear] = dear_draft.plan(no_lookup)
    assert dear.k == 0


def test_a_draft_its_evidence_does_not_vouch_for_is_asked_only_as_a_try_the_budget_pays_for():
    """The priors say a draft is worth asking; nothing it has done says so. Such an ask is a try: taken only once the
    exploration budget covers what it would lose with none of its tokens accepted, so asks of a draft that never agrees
    cost no more than the budget's share of the time; once its asks have agreed, it is asked on its merits."""
    plan = planner(CHEAP_TO_FOUR, draft_ms=0.5)
    no_lookup = [SlotOptions(8, Lookup(), 1)]
    plain_ms = spent_ms = 0.0
    steps = []
    for _ in range(400):
        [choice] = plan.plan(no_lookup)
        steps.append(choice)
        plain_ms += plan.step_ms([PLAIN], no_lookup)
        spent_ms += plan.step_ms([choice], no_lookup)  # none of its tokens accepted: each ask's whole cost is lost
    tries = [i for i, choice in enumerate(steps) if choice.model_k]
    assert tries and tries[0] > 0  # not on the priors at once: the first try waited for the budget
    assert spent_ms <= (1 + EXPLORE_SHARE) * plain_ms
    for _ in range(4):
        plan.observe_model(steps[tries[0]], 0, steps[tries[0]].k, steps[tries[0]].k)  # its asks agree
    assert all(plan.plan(no_lookup)[0].model_k for _ in range(20))


def test_each_slot_judges_long_copies_by_its_own_answer():
    """Earlier answers taught that long copies break within a few tokens; one slot's answer has copied its source whole
    since. That slot drafts a long match far; a slot whose answer has shown nothing yet drafts it as the rates say."""
    plan = planner({1: 100.0, 2: 110.0, 4: 130.0, 8: 170.0, 16: 250.0, 32: 410.0, 33: 420.0})
    for _ in range(20):
        plan.lookup_acceptance.observe(20, 16, 3)
    rewriting = SequenceBelief()
    for start in range(0, 96, 32):
        copy = list(range(start, start + 32))
        plan.settle([ShadowRun(20, copy)], copy, rewriting.copy_effect)
    long_match = Lookup(list(range(500, 532)), 20)
    [copying] = plan.plan([SlotOptions(32, long_match, 1, rewriting)])
    [fresh] = plan.plan([SlotOptions(32, long_match, 1, SequenceBelief())])
    assert copying.k == 32 and fresh.k <= 4


def test_a_slot_in_prose_drafts_a_two_token_match_only_as_far_as_its_answer_can_afford_to_lose():
    """thin_bets.py, per slot: the same run is drafted by a slot whose answer's lookup bets have won enough to pay for a
    lost one, not by one whose answer has won nothing yet."""
    plan = planner({1: 100.0, 2: 145.0, 3: 186.0, 4: 167.0})
    for lesson in range(40):  # earlier answers: such runs held 3 times in 4
        plan.lookup_acceptance.observe(2, 3, 0 if lesson % 4 == 0 else 3, unsure=True)
    pair = Lookup([7, 8, 9], 2)
    fresh, written = SequenceBelief(), SequenceBelief()
    for belief in (fresh, written):
        belief.confidence.observe_probability(0.4)
    written.stepped(plan.costs, lookup_k=1, settled=[5, 6])  # a lookup token won: 2 tokens for 145 ms, not 200
    [unafforded] = plan.plan([SlotOptions(3, pair, 1, fresh)])
    [afforded] = plan.plan([SlotOptions(3, pair, 1, written)])
    assert unafforded.k == 0 and afforded.source is Source.NGRAM and afforded.k > 0


def sure(planner: Planner) -> Planner:
    """Both have been right: copies that agree this far, and the draft model."""
    for _ in range(40):
        planner.lookup_acceptance.observe(20, 8, 8)
        for model in planner.draft_acceptance.models:
            model.observe(8, 8)
    return planner


def test_a_short_sure_lookup_run_is_continued_by_the_draft_model():
    """Hybrid inside the planner: the run's source ends after three tokens, and the draft model, cheap and right,
    continues it; a whole run stays lookup's alone (free), and no run is the model's alone."""
    short = Lookup([11, 12, 13], match_length=20)
    [choice] = sure(planner(*GPU_LIKE)).plan([SlotOptions(8, short, 1)])
    assert (choice.source, choice.lookup_k, choice.model_k) == (Source.HYBRID, 3, choice.k - 3) and choice.model_k >= 1
    assert choice.label == f"hybrid K=3+{choice.model_k}"
    [whole] = sure(planner(*GPU_LIKE)).plan([SlotOptions(8, Lookup(list(range(11, 19)), 20), 1)])
    assert whole.source is Source.NGRAM
    [alone] = sure(planner(*GPU_LIKE)).plan([SlotOptions(8, Lookup(), 1)])
    assert alone.source is Source.MODEL


def test_a_hybrid_step_is_priced_with_its_lookup_tokens_in_the_drafts_first_pass():
    plan = sure(planner(CHEAP_TO_FOUR, draft_ms=0.5))
    options = [SlotOptions(8, Lookup([11, 12, 13], 20), 1)]
    hybrid = Choice(Source.HYBRID, 5, 4.0, lookup_k=3)
    model = Choice(Source.MODEL, 2, 2.0)
    costs, draft = plan.costs, plan.costs.draft
    assert draft is not None
    assert plan.step_ms([hybrid], options) == costs.verify(6) + draft.cost(1 + 3) + draft.cost(1)
    assert plan.step_ms([model], options) == costs.verify(3) + draft.cost(1) + draft.cost(1)


def test_chained_heads_are_priced_pass_by_pass_and_asked_for_no_more_than_they_draft():
    """Three chained MTP heads (HeadDrafter.draft): each head reads the tokens the head has not, then head d re-reads the
    d + 1 tokens of each draft reaching position d; K stops at three. Two slots, one drafting 3 and one 2 with 2 and 1
    tokens queued: three catch-up passes of 3, then passes of 2, 4 and 3 tokens."""
    plan = Planner(CostTable.given(CHEAP_TO_FOUR, 0.5), has_draft_model=True, model_source=Source.MTP,
                   chained_heads={Source.MTP: 3})
    sure(plan)
    head, costs = plan.sources[0].costs, plan.costs
    [alone] = plan.plan([SlotOptions(8, Lookup(), 0)])
    assert (alone.source, alone.k) == (Source.MTP, 3)
    one = [SlotOptions(8, Lookup(), 0)]
    assert plan.step_ms([alone], one) == pytest.approx(costs.verify(4) + head.cost(1) + head.cost(2) + head.cost(3))
    two = [SlotOptions(8, Lookup(), 2), SlotOptions(8, Lookup(), 1)]
    drafts = [Choice(Source.MTP, 3, 4.0), Choice(Source.MTP, 2, 3.0)]
    assert plan.step_ms(drafts, two) == pytest.approx(costs.verify(7) + 3 * head.cost(3) + head.cost(2) + head.cost(4) + head.cost(3))


def belief_after(asks_per_resume: int) -> SequenceBelief:
    """A slot's belief after six resumes of the draft that bought `asks_per_resume` asks each, in an answer where lookup
    has since taken no step."""
    belief = SequenceBelief()
    for _ in range(6):
        belief.asked(missed=40)
        for _ in range(asks_per_resume - 1):
            belief.asked(missed=2)
    belief.new_answer()
    for _ in range(10):
        belief.stepped(CostTable.given(CHEAP_TO_FOUR), lookup_k=0, settled=[5])
    return belief


def test_a_slots_catch_up_is_priced_over_the_asks_a_resume_buys_there():
    """As auto prices it for a lone answer (catch_up.py): writing code, a resume buys dozens of asks and its catch-up is
    worth paying; editing code, lookup takes the step back after one, and the same catch-up is not. Priced whole, as
    the planner once did, a draft that sat out a stretch never resumed: one client of `serve --parallel 4` wrote fib on
    a Q8_0 target at 0.7x what auto wrote it at."""
    # A cheap-batch target, and a draft whose catch-up of 16 tokens costs a target pass.
    plan = Planner(CostTable(PassCosts({1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 14.0}), PassCosts({1: 1.0, 16: 12.0}), fixed=True),
                        has_draft_model=True)
    asked_before(plan)
    for name, asks, drafts in (("writing code", 30, True), ("editing code", 1, False)):
        [choice] = plan.plan([SlotOptions(1, Lookup(), 16, belief_after(asks))])
        assert (choice.source is Source.MODEL) is drafts, name
    options = [SlotOptions(1, Lookup(), 16, belief_after(30))]
    model = Choice(Source.MODEL, 1, 1.9)
    assert plan.step_ms([model], options, spread=True) < plan.step_ms([model], options)  # the real step pays it whole


def test_the_draft_model_is_judged_by_how_sure_each_slots_target_is():
    """Asks where the target was unsure (prose) teach that class alone: a slot in sure text (code) still drafts, one in
    unsure text does not, in the same batch."""
    plan = planner(*GPU_LIKE)
    sure_text, prose = SequenceBelief(), SequenceBelief()
    for _ in range(10):
        sure_text.confidence.observe_probability(0.99)
        prose.confidence.observe_probability(0.3)
    for _ in range(20):
        plan.observe_model(Choice(Source.MODEL, 4, 5.0), prose.confidence.class_index, 4, 0)
        plan.observe_model(Choice(Source.MODEL, 4, 5.0), sure_text.confidence.class_index, 4, 4)
    choices = plan.plan([SlotOptions(4, Lookup(), 1, sure_text), SlotOptions(4, Lookup(), 1, prose)])
    assert choices[0].source is Source.MODEL and choices[1].k == 0


def test_a_prompt_chunk_fills_the_pass_up_to_a_size_that_costs_little_more():
    """Beside 2 or 4 generating slots, the chunk brings the pass to 16 tokens (2 + 14, 4 + 12), not past it: a chunk of
    16 made passes of 18 and 20, which cost a third more for two to four prompt tokens more."""
    costs = CostTable.given(LUMPY_CPU)
    for n_verify in (2, 4):
        chunk = prefill_budget(costs, n_verify, costs.verify(n_verify), 2048)
        assert n_verify + chunk == 16, n_verify


def test_on_a_gpu_a_prompt_chunk_is_the_largest_that_adds_a_steps_worth():
    costs = CostTable.given({1: 10.0, 2: 10.2, 4: 10.5, 8: 11.0, 16: 12.0, 32: 14.0, 64: 18.0, 128: 30.0, 256: 55.0})
    step_ms = costs.verify(2)
    chunk = prefill_budget(costs, 2, step_ms, 2048)
    assert costs.verify(2 + chunk) - costs.verify(2) <= step_ms < costs.verify(2 + 2 * chunk) - costs.verify(2)


def test_a_prompt_always_moves_unless_the_pass_is_full():
    costs = CostTable.given(LUMPY_CPU)
    assert prefill_budget(costs, 64, 1.0, 2048) >= MIN_PREFILL_CHUNK  # a step's worth buys no token: the floor still rides
    assert prefill_budget(costs, 2044, 1000.0, 2048) == 4  # the room the pass has left
    assert prefill_budget(costs, 2048, 1000.0, 2048) == 0


def test_the_targets_mtp_head_is_priced_as_a_draft_model_is_and_never_continues_a_lookup_run():
    """Where the target carries MTP layers and no draft model is loaded, the head is auto's model source: chosen where
    its asks agree and its passes pay, at a GPU's costs and at a 2-core CPU's (a verify of 4 tokens at 1.6 one-token
    passes, the head a tenth of the target); left where they never agree. It cannot continue a lookup run (it would
    need the target's rows for the run's tokens), so no hybrid is offered."""
    cpu = {1: 70.0, 2: 85.0, 4: 112.0, 8: 180.0, 16: 300.0}
    short_run = [SlotOptions(8, Lookup([100, 101], match_length=2), 1)]
    for verify in (CHEAP_TO_FOUR, cpu):
        agreeing = Planner(CostTable.given(verify, 0.1 * verify[1]), has_draft_model=True, model_source=Source.MTP)
        for asked_class in range(len(CLASS_EDGES) + 1):
            for _ in range(20):
                agreeing.observe_model(Choice(Source.MTP, 4, 5.0), asked_class, 4, 4)
        [choice] = agreeing.plan(short_run)
        assert choice.source is Source.MTP and choice.k >= 2 and choice.lookup_k == 0
        never = Planner(CostTable.given(verify, 0.1 * verify[1]), has_draft_model=True, model_source=Source.MTP)
        for asked_class in range(len(CLASS_EDGES) + 1):
            for _ in range(20):
                never.observe_model(Choice(Source.MTP, 4, 5.0), asked_class, 4, 0)
        no_lookup = [SlotOptions(8, Lookup(), 1)]
        steps = [never.plan(no_lookup)[0] for _ in range(200)]
        spent_ms = sum(never.step_ms([step], no_lookup) for step in steps)  # none of a try's tokens accepted
        assert spent_ms <= (1 + EXPLORE_SHARE) * 200 * never.step_ms([PLAIN], no_lookup)  # tries, from the budget only


def test_with_a_draft_model_and_the_targets_head_each_step_asks_the_one_that_pays():
    """A pair with a draft model whose target keeps MTP layers: both are sources of auto's model tokens, each with its
    own pass costs and acceptance. Where one agrees and the other never does, the agreeing one is asked, at a GPU's
    costs and at a 2-core CPU's (the head a tenth of the target, the draft model a third); where both agree, the
    cheaper one (the head); the head never continues a lookup run, the draft model may."""
    cpu = {1: 70.0, 2: 85.0, 4: 112.0, 8: 180.0, 16: 300.0}
    no_lookup = [SlotOptions(8, Lookup(), {Source.MODEL: 1, Source.MTP: 1})]
    for verify in (CHEAP_TO_FOUR, cpu):
        for agreeing in ((Source.MODEL,), (Source.MTP,), (Source.MODEL, Source.MTP)):
            costs = CostTable.given(verify, verify[1] / 3)
            costs.head = PassCosts({n: ms / 10 for n, ms in verify.items()})
            plan = Planner(costs, has_draft_model=True, head=Source.MTP)
            assert [source.source for source in plan.sources] == [Source.MODEL, Source.MTP]
            for source in (Source.MODEL, Source.MTP):
                for asked_class in range(len(CLASS_EDGES) + 1):
                    for _ in range(20):
                        plan.observe_model(Choice(source, 4, 5.0), asked_class, 4, 4 if source in agreeing else 0)
            [choice] = plan.plan(no_lookup)
            expected = Source.MTP if Source.MTP in agreeing else Source.MODEL
            assert choice.source is expected and choice.k >= 2, (verify, agreeing, choice)


def test_where_no_draft_could_win_a_step_without_a_lookup_run_is_plain_as_the_full_plan_finds():
    """A lone slot with no lookup run, where the draft model could not beat plain decoding even with every token accepted,
    is planned without pricing each K (planner._model_may_win): the same choice and the same exploration budget as the
    full plan, on CPU-shaped, lumpy and GPU-shaped costs, with a draft that agreed and one never asked."""
    shapes = [CPU_LIKE, (LUMPY_CPU, 25.0), (LUMPY_CPU, 5.0), GPU_LIKE, (CHEAP_TO_FOUR, 0.5), (CHEAP_TO_FOUR, 20.0)]
    shortcuts = 0
    for verify, draft_ms in shapes:
        for vouched in (True, False):
            quick, full = planner(verify, draft_ms), planner(verify, draft_ms)
            full._model_may_win = lambda options: True  # type: ignore[method-assign]  # the whole plan, every step
            for model in (quick, full):
                if vouched:
                    asked_before(model)
                model.observe_overhead(0.3)
            for step in range(40):
                belief = SequenceBelief()
                belief.confidence.observe_probability(0.5 + step / 80)
                slot = [SlotOptions(8, Lookup(), 1 + step % 3, belief)]
                assert quick.plan(slot) == full.plan(slot)
                assert quick.exploration.saved_ms == full.exploration.saved_ms
            shortcuts += not quick._model_may_win(slot[0])
    assert 0 < shortcuts < len(shapes) * 2  # the shortcut ran on some shapes (CPU-like), and the full plan on others
