"""The exploration budget: what trying a draft model auto does not yet trust may cost."""

from __future__ import annotations

import pytest


def test_trying_a_losing_draft_model_costs_at_most_its_share_of_the_time():
    from localspec.engine.drafters.auto.exploration import ExplorationBudget
    from localspec.engine.tuning import EXPLORE_SHARE

    budget = ExplorationBudget()
    assert not budget.afford(1.0)  # the first try too is paid for: nothing is saved yet (issue 55)
    tries = 0
    for _ in range(1000):
        budget.accrue(100.0)  # a 100 ms step that did not ask the draft
        tries += budget.afford(300.0)  # a try that loses 300 ms if none of its tokens is accepted
    assert tries == int(1000 * 100.0 * EXPLORE_SHARE // 300.0) == 6


def test_one_try_spends_no_more_than_an_answer_earns_however_long_the_budget_was_saved():
    from localspec.engine.drafters.auto.exploration import ExplorationBudget
    from localspec.engine.tuning import EXPLORE_SHARE

    budget = ExplorationBudget()
    earned = 100 * 100.0 * EXPLORE_SHARE  # an answer of 100 steps of 100 ms, none asking the draft: 200 ms
    for _ in range(10):
        budget.new_answer()
        for _ in range(100):
            budget.accrue(100.0)
    assert budget.saved_ms == pytest.approx(10 * earned)
    assert not budget.afford(1.5 * earned)  # saved over ten answers, spent by one
    assert budget.afford(earned)
    budget.new_answer()
    for _ in range(300):  # an answer three times as long earns its own dearer try
        budget.accrue(100.0)
    assert budget.afford(2.5 * earned)
