"""The planner's step price (auto/step_price.py) and its search (auto/search.py): one price for one slot and for many,
and a search whose joint moves need two slots that move."""

from __future__ import annotations

import pytest

from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.auto.candidates import candidates
from localspec.engine.drafters.auto.choice import Choice, Source
from localspec.engine.drafters.auto.planner import PLAIN, Planner, SlotOptions
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable

VERIFY = {1: 10.0, 2: 11.0, 4: 13.0, 8: 40.0, 16: 80.0, 32: 160.0}


def test_slots_drafting_to_different_depths_share_a_pass_per_position():
    """Three slots drafting 3, 1 and 2 tokens with the draft model: one first pass reads every slot's pending tokens and
    gives each its first token; position 1 is a pass of the two slots that reach it, position 2 of the one."""
    plan = Planner(CostTable.given(VERIFY, 1.0), has_draft_model=True)
    draft, costs = plan.costs.draft, plan.costs
    assert draft is not None
    slots = [SlotOptions(8, Lookup(), 1), SlotOptions(8, Lookup(), 3), SlotOptions(8, Lookup(), 2)]
    choices = [Choice(Source.MODEL, 3, 2.0), Choice(Source.MODEL, 1, 1.5), Choice(Source.MODEL, 2, 1.8)]
    assert plan.step_ms(choices, slots) == pytest.approx(costs.verify(9) + draft.cost(1 + 3 + 2) + draft.cost(2) + draft.cost(1))


def test_a_batch_of_one_is_priced_as_one_slot_alone():
    """The same price whether the slot is alone or beside slots that draft nothing and read nothing: only their tokens
    in the target's pass differ."""
    plan = Planner(CostTable.given(VERIFY, 1.0), has_draft_model=True)
    draft, costs = plan.costs.draft, plan.costs
    assert draft is not None
    drafting = SlotOptions(8, Lookup([5, 6]), 4)
    hybrid = Choice(Source.HYBRID, 5, 3.0, lookup_k=2)
    alone = plan.step_ms([hybrid], [drafting])
    beside = plan.step_ms([hybrid, PLAIN], [drafting, SlotOptions(8, Lookup(), 1)])
    assert alone == pytest.approx(costs.verify(6) + draft.cost(4 + 2) + 2 * draft.cost(1))
    assert beside - alone == pytest.approx(costs.verify(7) - costs.verify(6))


def test_a_chained_heads_one_queued_token_is_the_steps_own_alone_and_in_a_batch():
    """A head with one token queued reads it every step it drafts: it is paid whole as choices weigh a step, not spread
    over the asks a resume buys, for a slot alone and for slots together; more queued tokens are a catch-up, spread."""
    plan = Planner(CostTable.given(VERIFY, 1.0), has_draft_model=True, model_source=Source.MTP, chained_heads={Source.MTP: 3})
    resumed = SequenceBelief()
    for _ in range(6):  # each resume of the head bought 30 asks
        resumed.asked(missed=40)
        for _ in range(29):
            resumed.asked(missed=1)
    head = Choice(Source.MTP, 2, 2.5)
    for slots in ([SlotOptions(8, Lookup(), 1, resumed)], [SlotOptions(8, Lookup(), 1, resumed), SlotOptions(8, Lookup(), 1, resumed)]):
        choices = [head] * len(slots)
        assert plan.step_ms(choices, slots, spread=True) == plan.step_ms(choices, slots)
    caught_up = [SlotOptions(8, Lookup(), 12, resumed)] * 2
    assert plan.step_ms([head] * 2, caught_up, spread=True) < plan.step_ms([head] * 2, caught_up)


def test_the_only_slot_that_asks_in_a_batch_takes_its_best_move_at_the_planners_own_price():
    """Beside a slot that may not draft, a slot with a lookup run drafts the K whose step the planner prices best; no
    joint move fills the pass past it (filling weighs a longer pass by its cost alone, not its change of size)."""
    plan = Planner(CostTable.given(VERIFY, switch_ms=6.0), has_draft_model=False)
    for _ in range(20):
        plan.lookup_acceptance.observe(12, 8, 8)
    plan.observe_verify(2, VERIFY[2])  # the last pass had two tokens: any other size pays for a new graph
    run = Lookup(list(range(100, 108)), 12)
    slots = [SlotOptions(8, run, 1), SlotOptions(0, Lookup(), 1)]
    [choice, other] = plan.plan(slots)
    assert other == PLAIN

    expected = candidates(slots[0], plan.sources, plan.lookup_acceptance, plan.costs).lookup

    def rate(k: int) -> float:
        trial = [Choice(Source.NGRAM, k, 1 + expected[k]) if k else PLAIN, PLAIN]
        return sum(c.predicted for c in trial) / plan.step_ms(trial, slots, spread=True)

    assert choice.k == max(range(len(expected)), key=rate)


def test_where_no_slot_has_anything_to_draft_the_plan_is_plain_at_once():
    """No lookup run and no model to ask: nothing the plan reads could make it other than plain decoding."""
    plan = Planner(CostTable.given(VERIFY), has_draft_model=False)
    assert plan.plan([SlotOptions(8, Lookup(), 1)] * 3) == [PLAIN] * 3
    assert plan.exploration.saved_ms == 0.0  # with no model to try, nothing is saved up for a try
