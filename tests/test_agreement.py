"""What auto expects of a lookup run (the agreement model): learned per class of match and per position, answer by answer."""

from __future__ import annotations

import numpy as np

from localspec.engine.drafters.auto.agreement import AgreementModel, CopyEffect, ShadowRun, settle
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import Ask, TargetRow
from localspec.engine.drafters.ngram import PromptLookup
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import ACCEPTANCE_PRIOR_WEIGHT, CARRIED_RUNS, MATCH_CLASS_PRIORS
from tests.drafting import CHEAP_BATCH_MS


def test_a_new_answer_weighs_what_earlier_answers_runs_taught_as_a_few_runs_of_its_own():
    """Code edits taught that long copies hold; a YAML-to-JSON answer's copies break after a token. Its own runs (judged
    every step, drafted or not) must soon outweigh the earlier answers': carried at full weight, auto bet 15 lookup
    tokens two or three times an answer on such text, at 8 times a token's cost each on a 2-core CPU (0.91x plain)."""
    rates_after_three_breaks = []
    for new_answer in (False, True):
        model = AgreementModel()
        for _ in range(40):
            model.observe(20, 16, 16)  # earlier answers: every long copy held
        if new_answer:
            model.carry_over(CARRIED_RUNS)
        for _ in range(3):
            model.observe(20, 16, 1)  # this answer's runs: each breaks after one token
        rates_after_three_breaks.append(model.rates(20, 2)[1])
    held_over, weighed_anew = rates_after_three_breaks
    assert held_over > 0.85 and weighed_anew < 0.7


def test_long_copies_that_break_more_than_the_learned_rates_expect_are_expected_shorter():
    agreement = AgreementModel()
    for _ in range(20):
        agreement.observe(20, 16, 16)  # earlier answers' copies held
    breaking = CopyEffect()
    for _ in range(3):
        agreement.observe_positions(20, 0, 0, True, effect=breaking)  # this answer's long matches broke at once
    assert agreement.prefix_curves(20, 16, effect=breaking)[0][16] < 0.9 * agreement.prefix_curves(20, 16, effect=CopyEffect())[0][16]
    assert agreement.prefix_curves(2, 3, effect=breaking) == agreement.prefix_curves(2, 3)  # a short match is no copy yet


def test_short_lookup_matches_are_judged_apart_where_the_target_is_unsure():
    """A 3-token match is a coincidence in prose and often a copy in code: failing runs found where the target was
    unsure do not lower what auto expects of short matches where it is sure, nor the other way round; a long match is
    a copy anywhere, one class for both. Through the controller: a run found while the target is unsure teaches the
    unsure class once the text that follows judges it."""
    agreement = AgreementModel()
    for _ in range(30):
        agreement.observe(3, 3, 0, unsure=True)
    assert agreement.expected_accepted(3, 3, unsure=True) < 0.1
    assert agreement.expected_accepted(3, 3) == AgreementModel().expected_accepted(3, 3)
    for _ in range(30):
        agreement.observe(20, 4, 0, unsure=True)
    assert agreement.expected_accepted(20, 4) == agreement.expected_accepted(20, 4, unsure=True) < AgreementModel().expected_accepted(20, 4) / 2

    controller = AutoDrafter(CostTable.given(CHEAP_BATCH_MS))
    controller.begin(0, [5, 6, 7, 8, 9, 5, 6])  # "5 6" occurred before: a run of "7 8 9 ..." from a 2-token match
    controller.observe(TargetRow(0, np.zeros(64, dtype=np.float32)))  # the target torn between 64 tokens
    assert controller.confidence.unsure
    before = controller.lookup_acceptance.expected_accepted(2, 3, unsure=True)
    controller.propose([Ask(0, 3, 0.0)])[0]
    controller.accept(0, [40])  # the text went elsewhere: the run's first token was wrong
    assert controller.lookup_acceptance.expected_accepted(2, 3, unsure=True) < before
    assert controller.lookup_acceptance.expected_accepted(2, 3) == AgreementModel().expected_accepted(2, 3)


def test_a_short_match_in_the_answers_own_text_is_judged_apart_from_one_in_what_it_was_given():
    """A 2-token match in the prompt is the answer taking up what it was given; one in the answer's own text is it
    meeting its own words again (`in the` twice in a haiku), right far less often, and so is a long one (code that
    repeats its own lines, then differs). The lookup says where its run comes from, and failing runs from the answer's
    own text do not lower what auto expects of runs from the prompt."""
    drafter = PromptLookup()
    drafter.start([5, 6, 7, 8, 9])
    drafter.advance([5, 6])  # "5 6" occurred in the prompt: its run comes from there
    lookup = drafter.lookup(3)
    assert lookup.tokens == [7, 8, 9] and not lookup.own
    drafter.advance([40, 41, 42, 40, 41])  # "40 41" occurred in the answer itself
    lookup = drafter.lookup(3)
    assert lookup.tokens == [42, 40, 41] and lookup.own

    agreement = AgreementModel()
    for _ in range(30):
        agreement.observe(2, 3, 0, own=True)
    assert agreement.expected_accepted(2, 3, own=True) < 0.1
    assert agreement.expected_accepted(2, 3) == AgreementModel().expected_accepted(2, 3)
    assert agreement.expected_accepted(2, 3, unsure=True) == AgreementModel().expected_accepted(2, 3, unsure=True)
    for _ in range(30):
        agreement.observe(20, 4, 0, own=True)
    assert agreement.expected_accepted(20, 4, own=True) < AgreementModel().expected_accepted(20, 4) / 2
    assert agreement.expected_accepted(20, 4) == AgreementModel().expected_accepted(20, 4)


def test_a_lookup_run_teaches_each_position_as_soon_as_it_is_judged():
    """A long copy's run is decided only where the copy ends: taught only then, auto drafted a copy's first 32 tokens
    3 at a time on its priors. Each position teaches as the text confirms it, and in all the run teaches what it would
    have taught whole."""
    model = AgreementModel()
    before = model.expected_accepted(20, 16)
    shadows = settle([ShadowRun(20, list(range(100, 132)))], list(range(100, 112)), model)  # 12 of 32 held so far
    assert shadows and model.expected_accepted(20, 16) > before  # undecided, and taught already
    assert not settle(shadows, [112, 7], model)  # one more held, then the copy ended
    whole = AgreementModel()
    whole.observe(20, 32, 13)
    assert model == whole


def test_a_copy_that_held_its_first_tokens_goes_on_alike_whatever_its_start():
    """Past its first EARLY tokens, a copy's length is learned from every run: a class that never saw a long copy
    expects one after another class's long copies showed how far copies go; its first positions stay its own."""
    model = AgreementModel()
    before_short, before_long = model.expected_accepted(2, 16), model.expected_accepted(8, 16)
    for _ in range(30):
        model.observe(match_length=20, n_drafted=16, n_accepted=16)  # long copies, all at 16+ agreement
    assert model.expected_accepted(8, 16) > 1.3 * before_long
    assert model.given.deep.rate(8) > 0.95
    assert model.given.early[2].rate(0) == MATCH_CLASS_PRIORS[2]  # a 2-token coincidence is not judged by them
    assert model.expected_accepted(2, 16) > before_short
    for _ in range(30):
        model.observe(match_length=2, n_drafted=16, n_accepted=0)  # 2-token matches keep failing at once
    assert model.expected_accepted(2, 16) < 0.1 < model.expected_accepted(20, 16) - 10


def test_a_copys_far_positions_lean_on_what_all_its_positions_showed():
    """A long copy reaches its far positions rarely, so each of them had a try or two and its prior ruled: on a Q8_0
    target a rename's copies of 30 tokens were drafted 7 at a time. Where a far position's own evidence is thin it leans
    on every position past the first few together; where its own evidence is rich it keeps it."""
    from localspec.engine.tuning import COPY_PRIOR, EARLY

    model = AgreementModel()
    for _ in range(20):
        model.observe(match_length=32, n_drafted=EARLY + 6, n_accepted=EARLY + 6)  # copies that held all they offered
    model.observe(match_length=32, n_drafted=EARLY + 20, n_accepted=EARLY + 20)  # one that went far
    far = model.given.deep.rate(15)  # one try, one hit
    assert far > 0.99 > (1 + ACCEPTANCE_PRIOR_WEIGHT * COPY_PRIOR) / (1 + ACCEPTANCE_PRIOR_WEIGHT)  # what that try and the prior alone would say
    assert model.given.deep.rate(30) > 0.99  # past all evidence: the pooled rate
    for _ in range(20):
        model.observe(match_length=32, n_drafted=EARLY + 6, n_accepted=EARLY + 2)  # then copies broke at the same place
    assert model.given.deep.rate(2) < 0.6 < model.given.deep.rate(1)  # a well-tried position keeps its own rate
