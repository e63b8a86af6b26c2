"""Prompt lookup and the adaptive controller: lossless on real llama.cpp, and choosing as the costs say."""

from __future__ import annotations

import time

import numpy as np
import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.defaults import AUTO_DRAFT_MAX
from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.drafters.auto.agreement import AgreementModel, CopyEffect, ShadowRun, settle
from localspec.engine.drafters.auto.choice import Choice
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.auto.edit_points import EditPoints
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.base import Ask
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.edits import RESUMED, SMALL_EDIT
from localspec.engine.drafters.ngram import MATCH_CAP, SEPARATOR, Lookup, LookupMemory, Lookups, NgramDrafter, PromptLookup
from localspec.engine.drafters.registry import DRAFTERS
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable, PassCosts
from localspec.engine.stats import GenerationStats
from localspec.engine.tuning import ACCEPTANCE_PRIOR_WEIGHT, CARRIED_RUNS, FLAGGED, MATCH_CLASS_PRIORS
from tests.conftest import run
from tests.forced_choices import AlwaysHybrid
from tests.lossless import assert_clear_of_ties, assert_lossless

# Costs shaped like a large target on a GPU: verifying 16 tokens costs little more than one, drafting is cheap.
GPU_LIKE = {1: 20.0, 2: 20.5, 4: 21.0, 8: 22.0, 16: 24.0}, 1.0
# ...and like this 2-core CPU with the real pair: batches cost nearly what their tokens cost one by one.
CPU_LIKE = {1: 60.0, 2: 100.0, 4: 200.0, 8: 400.0, 16: 600.0}, 30.0


def test_prompt_lookup_continues_the_latest_earlier_occurrence():
    drafter = PromptLookup(n_min=2, n_max=3)
    drafter.start([5, 6, 7, 8, 1, 5, 6, 7, 9, 5, 6])
    assert drafter.lookup(3).tokens == [7, 9, 5]  # (5, 6) last seen before the end at index 6: 7, 9, 5 follow
    drafter.advance([7])
    assert drafter.lookup(2) == Lookup([9, 5], 3)  # now (5, 6, 7): its latest earlier occurrence is followed by 9
    drafter.start([1, 2, 3])
    assert drafter.lookup(4) == Lookup()  # nothing repeats yet
    with pytest.raises(ValueError):
        PromptLookup(n_min=3, n_max=2)


def test_prompt_lookup_copies_the_occurrence_that_agrees_longest():
    drafter = PromptLookup(n_min=2, n_max=2)
    drafter.start([1, 2, 3, 4, 9, 7, 3, 4, 8, 1, 2, 3, 4])
    # (3, 4) ends at 3 and at 7; the text before index 3 agrees with the end for 4 tokens, before 7 for only 2.
    assert drafter.lookup(3) == Lookup([9, 7, 3], 4)


def test_a_copy_resumed_after_an_edit_is_judged_by_all_it_agrees():
    """An edit (a renamed name, an inserted annotation) breaks the exact agreement; the source agrees again past it, so
    the run that resumes the copy counts the stretch before the edit too, and wins over a coincidence of the same
    length. Without a stretch that agrees past the edit, only the exact agreement counts."""
    source = list(range(100, 130))  # no token repeats
    drafter = PromptLookup(n_min=2, n_max=2)
    renamed = source[:12] + [7] + source[13:20]  # source[12] renamed to 7; copying resumed for 7 tokens
    drafter.start(source + [1, 118, 119, 2] + renamed)  # (118, 119) also occurs once more, followed by 2
    assert drafter.lookup(3) == Lookup(source[20:23], 7 + 12)
    inserted = source[:12] + [7, 8, 9] + source[12:20]  # three tokens inserted, then the copy resumed for 8
    drafter.start(source + inserted)
    assert drafter.lookup(3) == Lookup(source[20:23], 8 + 12)
    unrelated = [50, 51, 52, 53, 54, 55] + source[16:20]  # no stretch before the match agrees
    drafter.start(source + unrelated)
    assert drafter.lookup(3) == Lookup(source[20:23], 4)


NAME = 50  # a name the source uses three times; every other token of it is unique


def name_source() -> list[int]:
    source = list(range(100, 160))
    for i in (10, 25, 40):
        source[i] = NAME
    return source


def follow(drafter: PromptLookup, answer: list[int], upto: int, k: int = 8) -> list[list[int]]:
    """Write the answer's first `upto` tokens as the decode loop does (a lookup each step), and what each lookup offered."""
    offered = []
    for token in answer[:upto]:
        offered.append(drafter.lookup(k).tokens)
        drafter.advance([token])
    return offered


@pytest.mark.parametrize("renamed", [[7], [7, 8]])
def test_a_renamed_name_is_learned_once_and_drafted_through_the_rest_of_the_copy(renamed):
    """An answer that renames a name departs from its source at the first use: the lookup then offers the source from
    just past the name (a guess, RESUMED), and once the copy resumes, the rename is applied to the rest of it, so every
    later use is drafted right and the copy never breaks again."""
    source = name_source()
    answer = [t for token in source for t in (renamed if token == NAME else [token])]
    drafter = PromptLookup()
    drafter.start([1, 2, *source, 3, 4])
    follow(drafter, answer, 10)
    assert drafter.lookup(3) == Lookup([NAME, 111, 112], 10)  # the copy (10 tokens agree), which does not know the rename
    follow(drafter, answer[10:], len(renamed))
    assert drafter.lookup(3) == Lookup([111, 112, 113], RESUMED)  # the name was rewritten: the source from past it
    first = 10 + len(renamed) + 1
    drafter.advance([111])  # the copy resumed
    later = follow(drafter, answer[first:], len(answer) - first - 8)
    assert later == [answer[p : p + 8] for p in range(first, len(answer) - 8)]  # both later uses drafted renamed


def test_a_rename_the_answer_does_not_repeat_is_forgotten_and_an_insertion_is_no_rename():
    source = name_source()
    once = [7 if i == 10 else token for i, token in enumerate(source)]  # only the first use renamed
    drafter = PromptLookup()
    drafter.start([1, 2, *source, 3, 4])
    offered = follow(drafter, once, 50)
    assert offered[24][1] == 7  # the second use was drafted renamed...
    assert offered[39][1] == NAME  # ...the answer kept it, so the third is drafted as the source has it
    drafter.start([1, 2, *source, 3, 4])
    follow(drafter, [source[30], source[31], 9], 3)  # a 2-token coincidence, then the answer goes its own way
    assert drafter.lookup(8) == Lookup()  # no guess: that was no copy
    inserted = source[:10] + [7, 8] + source[10:]  # two tokens added before the name: a type annotation, say
    drafter.start([1, 2, *source, 3, 4])
    offered = follow(drafter, inserted, 30)
    assert offered[13:28] == [inserted[p : p + 8] for p in range(13, 28)]  # the copy resumed at once, and renamed nothing


def test_whether_guesses_past_an_edit_pay_is_learned_anew_for_each_answer():
    controller = AutoDrafter(CostTable.given(CHEAP_BATCH_MS))
    for _ in range(20):
        controller.lookup_acceptance.observe(RESUMED, 8, 8)  # an answer that renames: every guess held
        controller.lookup_acceptance.observe(20, 8, 8)
    assert controller.lookup_acceptance.expected_accepted(RESUMED, 4) > 3
    controller.begin(0, [1, 2, 3])  # the next answer may rewrite freely
    assert controller.lookup_acceptance.given.early[RESUMED].rate(0) == MATCH_CLASS_PRIORS[RESUMED]
    assert controller.lookup_acceptance.expected_accepted(20, 4) > 3  # what copies are like is kept


def decide(controller: AutoDrafter, k_cap: int, lookup: Lookup) -> Choice:
    """auto's choice for sequence 0 at most `k_cap` draft tokens, given lookup's run there."""
    pending = controller.model.pending_tokens(0) if controller.model is not None else 0
    return controller.planner.plan([SlotOptions(k_cap, lookup, pending, controller.belief(0))])[0]


def asked_before(planner: Planner) -> None:
    """The draft has been asked before, where the target was sure, and agreed: its evidence vouches for it, so it is
    asked on its merits, not as a try paid from the exploration budget (planner.plan)."""
    planner.draft_acceptance[-1].observe(1, 1)


def test_a_new_answer_bets_on_a_guess_past_an_edit_only_where_the_target_is_sure():
    """Where the target is unsure (prose), a guess past an edit is a coincidence (1-2 in 20 held on the bench's plain
    answers); where it is sure (a rewrite), a quarter or more. At a 2-core CPU's costs (one more token in the pass costs
    a fifth of a step), a new answer bets on the guess in sure text, and in unsure text waits for its own evidence."""
    cpu = CostTable.given({1: 100.0, 2: 121.0, 3: 141.0, 4: 156.0})
    guess = Lookup([7, 8, 9], RESUMED)
    for probability, drafts in ((0.99, True), (0.4, False)):
        controller = AutoDrafter(cpu)
        controller.begin(0, [1, 2, 3])
        controller.confidence.observe_probability(probability)
        assert (decide(controller, 3, guess).k > 0) == drafts
        for _ in range(2):  # this answer's guesses held
            controller.lookup_acceptance.observe(RESUMED, 1, 1, unsure=controller.confidence.unsure)
        controller.belief(0).stepped(cpu, 1, [5, 6])  # and its lookup bets won enough to afford one on thin evidence (thin_bets.py)
        assert decide(controller, 3, guess).k > 0


def test_an_answer_whose_long_copies_hold_drafts_them_longer_than_earlier_answers_taught():
    """Earlier answers taught that long copies break within a few tokens (type annotations, edits every line). This one
    rewrites its source whole: once its own copies have held, a long match is drafted far further than the learned rates
    alone would draft it; the next answer starts from what the answers before taught, the last one's whole copies
    weighing most (planner.start_answer: earlier answers count as a few runs of the new one's)."""
    costs = CostTable.given({1: 100.0, 2: 110.0, 4: 130.0, 8: 170.0, 16: 250.0, 32: 410.0, 33: 420.0})
    source = list(range(100, 180))
    run = Lookup(list(range(500, 532)), 20)

    def taught() -> AutoDrafter:
        controller = AutoDrafter(costs)
        for _ in range(20):
            controller.lookup_acceptance.observe(20, 16, 3)
        return controller

    def copy_whole(controller: AutoDrafter) -> AutoDrafter:
        controller.begin(0, [*source, 1, 2])
        controller.accept(0, source[:20])
        at = 20
        while at < len(source) - 1:
            drafted = len(controller.propose([Ask(0, 32, 0.0)])[0].tokens)
            controller.accept(0, source[at : at + drafted + 1])
            at += drafted + 1
        return controller

    fresh = taught()
    fresh.begin(0, [9, 9, 9])
    assert decide(fresh, 32, run).k <= 4
    assert decide(copy_whole(taught()), 32, run).k == 32
    next_answer = copy_whole(taught())
    next_answer.begin(0, [9, 9, 9])
    assert decide(next_answer, 32, run).k == 32


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


def test_in_prose_a_two_token_match_is_drafted_only_as_far_as_the_answer_can_afford_to_lose():
    """A 2-token match in unsure text is a fair bet by the rates (about half hold), but a lost one is a short answer's
    whole margin: a haiku lost 4-7% to one. It is drafted only as far as the answer's budget covers a total loss: what
    its lookup bets have won. In sure text, and from a long match, the rates alone decide."""
    cpu = CostTable.given({1: 100.0, 2: 145.0, 3: 186.0, 4: 167.0})  # the Q4_K_M target's shape: 4 tokens cost 1.67x one
    pair = Lookup([7, 8, 9], 2)

    def taught(probability: float) -> AutoDrafter:
        controller = AutoDrafter(cpu)
        for lesson in range(40):  # earlier answers: such runs held 3 times in 4, in prose and in code
            for unsure in (True, False):
                controller.lookup_acceptance.observe(2, 3, 0 if lesson % 4 == 0 else 3, unsure=unsure)
        controller.begin(0, [1, 2, 3])
        controller.confidence.observe_probability(probability)
        return controller

    prose = taught(0.4)
    assert decide(prose, 3, pair).k == 0
    assert decide(prose, 3, Lookup([7, 8, 9], 20)).k > 0  # a long match is a copy: not thin evidence
    for _ in range(100):  # plain steps pay for no bet
        prose.belief(0).stepped(cpu, 0, [5])
    assert decide(prose, 3, pair).k == 0
    prose.belief(0).stepped(cpu, 1, [7, 8])  # a lookup bet won: 200 ms of plain decoding for 145, enough to lose one token
    assert decide(prose, 3, pair).k == 1
    prose.belief(0).stepped(cpu, 1, [7, 8])  # another: its winnings pay for a longer bet
    assert decide(prose, 3, pair).k == 3
    assert decide(taught(0.99), 3, pair).k == 3  # where the target is sure, the rates alone decide


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
    controller.observe_target(0, np.zeros(64, dtype=np.float32))  # the target torn between 64 tokens
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


def test_lookup_memory_finds_the_last_requests_answer_which_the_new_prompt_lacks():
    prefix, answer = list(range(100, 160)), list(range(500, 540))
    drafter = PromptLookup(memory=LookupMemory())
    drafter.start(prefix)
    drafter.advance(answer)
    drafter.start(prefix + answer[:3])  # an autocomplete after the user typed the first three tokens of the last completion
    assert drafter.lookup(8) == Lookup(answer[3:11], MATCH_CAP)  # found in the memory alone (see below)
    forgetful = PromptLookup()
    forgetful.start(prefix)
    forgetful.advance(answer)
    forgetful.start(prefix + answer[:3])
    assert forgetful.lookup(8) == Lookup()
    drafter.forget_requests()  # a new session (the bench's next prompt)
    drafter.start(prefix + answer[:3])
    assert drafter.lookup(8) == Lookup()


def test_lookup_memory_keeps_what_is_new_bounded_and_never_copies_across_texts():
    memory = LookupMemory(max_tokens=400)
    conversation = list(range(100, 200))
    memory.remember(conversation)
    memory.remember(conversation + [7, 8, 9])  # the next turn continues the last: only its tail is added, with some context
    assert memory.tokens == [SEPARATOR, *conversation, SEPARATOR, *conversation[-MATCH_CAP:], 7, 8, 9]
    memory.remember(conversation + [7, 8, 9])
    assert len(memory.tokens) == 1 + 100 + 1 + MATCH_CAP + 3  # nothing new: nothing added
    for start in range(1000, 5000, 100):
        memory.remember(list(range(start, start + 100)))
    assert len(memory.tokens) <= 400 and memory.tokens[-100:] == list(range(4900, 5000))  # the oldest half dropped
    drafter = PromptLookup(memory=LookupMemory())
    drafter.memory.remember([1, 2, 3])  # type: ignore[union-attr]
    drafter.start([9, 2, 3])
    assert drafter.lookup(4) == Lookup()  # (2, 3) ends the remembered text: nothing follows it there


def test_lookup_across_requests_is_lossless_and_drafts_the_answer_a_request_gave_before(tiny):
    config = GenerationConfig(max_tokens=60, draft_max=8, draft_p_min=0.0)
    with Engine(EngineConfig(tiny["target"])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
        for drafter in (NgramDrafter(), AutoDrafter(CostTable.given(GPU_LIKE[0]))):
            decoder = Decoder(engine.target, drafter)
            first = run(decoder, prompt, config)
            again = run(decoder, prompt, config)  # an editor sends the same request again: the answer is only in the memory
            assert_lossless(plain, first, label=drafter.name)
            assert_lossless(plain, again, label=drafter.name)
            assert again.finished.stats.draft_n_accepted >= 0.8 * len(again.tokens) > first.finished.stats.draft_n_accepted
            drafter.forget_requests()  # a new session (the bench's next measurement): the answer is gone from the memory
            forgotten = run(decoder, prompt, config)
            assert_lossless(plain, forgotten, label=drafter.name)
            assert forgotten.finished.stats.draft_n_accepted < 0.8 * len(forgotten.tokens), drafter.name


REPEATING = "the cat sat on the mat; the cat sat on the mat"


@pytest.mark.parametrize("draft_name", ["same", "near", "unrelated"])
def test_every_drafter_is_lossless_on_tiny_models(tiny, tmp_path, draft_name):
    with Engine(EngineConfig(tiny["target"], tiny[draft_name], self_draft_dir=tmp_path)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", REPEATING)])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
        for drafter in [d for d, row in DRAFTERS.items() if row.drafts and not row.mtp_layers and not row.eagle3_head]:  # test_mtp, test_eagle3
            out = run(engine.decoder(drafter), prompt, GenerationConfig(max_tokens=60, draft_max=8, draft_p_min=0.0))
            assert_lossless(plain, out, label=drafter)
            stats = out.finished.stats
            if drafter == "auto":
                assert sum(stats.decisions.values()) == stats.n_steps  # auto reports every choice...
                assert stats.draft_ms_by_decision.keys() == stats.decisions.keys()  # ...and where its drafting time went
                assert sum(stats.draft_ms_by_decision.values()) == pytest.approx(stats.t_draft_ms)
                # ...and the tokens each source's steps made: all but the first, the prompt's pass's (issue 75)
                assert sum(share.tokens for share in stats.by_source) == stats.predicted_n - 1
            elif (drafter, draft_name) != ("hierarchical", "unrelated"):  # there the draft vetoes every lookup (tested below)
                assert stats.draft_n > 0, drafter  # every drafter really drafted


def drafter_stats(engine: Engine, drafter: str, text: str = REPEATING, tokens: int = 80) -> GenerationStats:
    """Statistics of one drafter; the prompt is checked clear of near-ties, so acceptance figures hold on any machine."""
    prompt = chat_prompt_tokens(engine.target, [Message("user", text)])
    assert_clear_of_ties(run(engine.plain, prompt, GenerationConfig(max_tokens=tokens)))
    return run(engine.decoder(drafter), prompt, GenerationConfig(max_tokens=tokens, draft_max=6, draft_p_min=0.0)).finished.stats


def test_hybrid_continues_short_lookups_with_the_draft_model(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        ngram, hybrid = drafter_stats(engine, "ngram"), drafter_stats(engine, "hybrid")
    # Every step drafts the full K (lookup, then the model), and the gaps lookup leaves are filled with the target's own tokens.
    # (the last step drafts only what max_tokens leaves)
    assert hybrid.draft_n >= 6 * (hybrid.n_steps - 1) and hybrid.draft_n > ngram.draft_n
    assert hybrid.tokens_per_step > ngram.tokens_per_step


def test_hierarchical_sends_the_target_only_what_the_draft_agrees_with(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        agreeing = drafter_stats(engine, "hierarchical")
    with Engine(EngineConfig(tiny["target"], tiny["unrelated"])) as engine:
        lookup, vetted = drafter_stats(engine, "ngram"), drafter_stats(engine, "hierarchical")
    assert agreeing.draft_n > 0 and agreeing.acceptance_rate == 1.0  # vetted by a draft identical to the target
    assert vetted.draft_n < lookup.draft_n  # an unrelated draft vetoes lookup runs the target would have been shown


def test_the_tree_forks_and_the_target_sometimes_takes_the_fork(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=200))
        tree = run(engine.decoder("tree"), prompt, GenerationConfig(max_tokens=200, draft_max=4, draft_p_min=0.0))
        chain = run(engine.decoder("model"), prompt, GenerationConfig(max_tokens=200, draft_max=4, draft_p_min=0.0))
    assert_lossless(plain, tree)
    stats = tree.finished.stats
    assert stats.n_forks > 0 and stats.n_fork_accepted > 0, (stats.n_forks, stats.n_fork_accepted)
    assert stats.tokens_per_step > chain.finished.stats.tokens_per_step  # the second candidate rescues some steps


def test_after_a_tree_the_targets_cache_holds_exactly_the_settled_text(tiny):
    """Forks are verified in a second sequence and copied back when they win; no fork token may linger in sequence 0."""
    import numpy as np

    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        tree = run(engine.decoder("tree"), prompt, GenerationConfig(max_tokens=120, draft_max=4, draft_p_min=0.0))
        assert tree.finished.stats.n_fork_accepted > 0
        cached = list(engine.target.kv_tokens)
        text = prompt + tree.tokens  # the cache may run past it: a step's accepted tokens beyond max_tokens are settled, not shown
        assert cached[: len(text)] == text[: len(cached)] and len(cached) >= len(text) - 1
        probe = engine.target.decode([7], outputs=1)[0].copy()
        engine.target.forget(0)
        engine.target.prefill(cached)
        fresh = engine.target.decode([7], outputs=1)[0].copy()
        engine.target.forget(0)
        engine.target.prefill(cached[:-2] + [cached[-1], cached[-2]])  # control: the same tokens, two swapped
        swapped = engine.target.decode([7], outputs=1)[0].copy()  # a view dies with the context: read after the with, it would be freed memory
    # Batched and single-row passes round differently (about 1e-3 here); a wrong cache differs by far more.
    assert np.abs(probe - fresh).max() < 0.01 < np.abs(swapped - fresh).max()

def auto_decisions(target, draft, tokens: int, costs: tuple[dict[int, float], float]) -> dict[str, int]:
    """Real models and real acceptance; the costs are given (tiny models cost the same as their drafts). At p-min 0 the
    draft always offers the K tokens it is asked for (the tiny models are rarely sure of any token)."""
    with Engine(EngineConfig(target, draft)) as engine:
        assert engine.draft is not None
        drafter = ModelDrafter(engine.draft, lazy_start=True)  # as the engine gives auto
        decoder = Decoder(engine.target, AutoDrafter(CostTable.given(costs[0], costs[1]), drafter))
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        result = run(decoder, prompt, GenerationConfig(max_tokens=tokens, draft_max=8, draft_p_min=0.0))
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=tokens))
        assert_lossless(plain, result)
        return result.finished.stats.decisions


def test_the_controller_drafts_long_when_drafts_always_match(tiny):
    # The tiny target is rarely sure of a token, a class where a draft is expected to be right a third of the time: it
    # takes a dozen asks to learn that this one always is, and 800 tokens to show what auto does once it has.
    decisions = auto_decisions(tiny["talkative"], tiny["talkative"], 800, GPU_LIKE)
    def drafted(label: str) -> int:  # "model K=7" -> 7, "hybrid K=3+5" -> 8 (the draft model continuing a lookup run)
        return 0 if label == "none" else sum(int(part) for part in label.split("=")[1].split("+"))

    long_steps = sum(n for label, n in decisions.items() if label.split()[0] in ("model", "hybrid") and drafted(label) >= 6)
    # Its first dozen steps wait for the exploration budget to pay for its first ask (issue 55).
    assert long_steps >= 0.75 * sum(decisions.values()), decisions


def test_the_controller_stops_drafting_when_drafts_never_match(tiny):
    decisions = auto_decisions(tiny["target"], tiny["unrelated"], 400, CPU_LIKE)
    assert decisions.get("none", 0) >= 0.8 * sum(decisions.values()), decisions


def test_autos_draft_model_reads_the_prompt_only_once_it_drafts(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["unrelated"])) as engine:
        assert engine.draft is not None
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        costs = CostTable.given(CPU_LIKE[0], CPU_LIKE[1])
        idle = run(Decoder(engine.target, AutoDrafter(costs, ModelDrafter(engine.draft, lazy_start=True))), prompt,
                   GenerationConfig(max_tokens=40, draft_max=8))
        assert not any(label.startswith("model") for label in idle.finished.stats.decisions)
        assert engine.draft.kv_tokens == []  # never asked to draft: the prompt was never decoded into it
        eager = ModelDrafter(engine.draft)
        eager.begin(0, prompt)
        eager.read(0, len(prompt))  # the target read the prompt: an eager draft reads along
        assert engine.draft.kv_tokens == prompt[:-1]


def test_a_draft_too_slow_for_its_target_is_never_tried(tiny):
    slow_draft = CostTable.given({1: 10.0, 2: 19.0, 4: 38.0}, 9.0)
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        controller = AutoDrafter(slow_draft, ModelDrafter(engine.draft))
        controller.begin(0, [1, 2, 3])
        # Even all accepted, K draft tokens cost 9K + verify(K+1) > 10(K+1): not worth one exploring step.
        for _ in range(600):
            assert decide(controller, 4, Lookup()).source == "none"


def test_a_draft_that_stays_silent_is_rated_by_the_tokens_asked_of_it(tiny):
    """Under p-min a draft may offer nothing: that step still paid its decode and gave no token, as a rejection does.
    Rated only on what it offered, a draft mostly silent (on prose) looked good, and auto kept paying for it."""
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        controller = AutoDrafter(CostTable.given(GPU_LIKE[0], GPU_LIKE[1]), ModelDrafter(engine.draft, lazy_start=True))
        asked_before(controller.planner)
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        controller.begin(0, prompt)
        prior = controller.model_acceptance.rate(0)
        draft = controller.propose([Ask(0, 4, 1.0)])[0]  # p-min 1: the draft is never that sure
        assert draft.choice is not None and draft.choice.source == "model" and draft.tokens == []
        controller.accept(0, [prompt[-1]])  # the target's own token, the only one the step gave
        assert controller.model_acceptance.rate(0) < prior


def target_row(n_vocab: int, sure: bool = False, probability: float | None = None) -> np.ndarray:
    """Logits where the target is sure of one token (a probability near 1), gives it `probability`, or is torn between
    every token."""
    row = np.zeros(n_vocab, dtype=np.float32)
    if sure:
        row[5] = 30.0
    elif probability is not None:
        row[5] = np.log(probability * (n_vocab - 1) / (1 - probability))
    return row


def test_a_new_answer_outweighs_what_earlier_answers_taught_of_the_draft_within_a_few_asks(tiny):
    """A draft right 40 times on code, then an answer (a haiku) where it offers nothing: carried at full weight, that
    record kept it asked for a dozen steps, most of a short answer; as a belief worth a few asks, it stops soon."""
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        q8_0_on_2_cores = CostTable.given({1: 100.0, 2: 120.0, 4: 150.0, 8: 250.0}, 35.0)  # as the real pair measured
        controller = AutoDrafter(q8_0_on_2_cores, ModelDrafter(engine.draft, lazy_start=True))
        for _ in range(40):
            controller.model_acceptance.observe(8, 8)
        prompt = chat_prompt_tokens(engine.target, [Message("user", "a haiku about autumn")])
        controller.begin(0, prompt)
        sure = target_row(engine.target.n_vocab, sure=True)  # the target as sure as on the code: the same class of text
        controller.observe_target(0, sure)
        assert controller.model_acceptance.rate(0) > 0.85  # still believed, and asked first...
        controller.exploration.saved_ms = 1e9  # ...though its first ask reads the prompt, a try the budget pays for here
        asks = []
        for _ in range(16):
            draft = controller.propose([Ask(0, 4, 1.0)])[0]  # p-min 1: the draft is never that sure
            asks.append(draft.choice is not None and draft.choice.source == "model")
            controller.accept(0, [prompt[-1]])
            controller.observe_target(0, sure)
        assert asks[0] and sum(asks) <= 4, asks  # carried at full weight, it was asked 6 times and more


def test_autos_draft_acceptance_is_learned_per_class_of_the_targets_confidence(tiny):
    """The target says how sure it is on every step, for free. What the draft showed where the target was sure (code)
    does not move what auto believes of it where the target is unsure (prose), and the other way round; each ask
    teaches the class it was made in."""
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        controller = AutoDrafter(CostTable.given(*GPU_LIKE), ModelDrafter(engine.draft, lazy_start=True))
        prompt = [1, 2, 3]  # no token repeats: no lookup run, so every ask is the draft model's alone
        controller.begin(0, prompt)
        sure, unsure = (target_row(engine.target.n_vocab, flag) for flag in (True, False))
        for _ in range(4):
            controller.observe_target(0, unsure)
        unsure_prior = controller.model_acceptance.rate(0)
        for _ in range(4):
            controller.observe_target(0, sure)
        for _ in range(30):
            controller.model_acceptance.observe(8, 8)
        sure_rate = controller.model_acceptance.rate(0)
        for token in range(10, 16):
            draft = controller.propose([Ask(0, 4, 1.0)])[0]  # p-min 1: the draft offers nothing
            assert draft.choice is not None and draft.choice.source == "model"
            controller.accept(0, [token])  # the target's own token, a new one each time: still no lookup run
            controller.observe_target(0, sure)
        assert controller.model_acceptance.rate(0) < sure_rate
        for _ in range(4):
            controller.observe_target(0, unsure)
        assert controller.model_acceptance.rate(0) == unsure_prior  # neither the right nor the silent asks taught it


def test_a_losing_draft_is_not_tried_where_the_target_is_too_unsure_for_it_to_pay(tiny):
    """A try is made only where the draft would win accepted as often as the target is sure. Where the target is right
    half the time, no draft pays on a 2-core CPU's costs, so none is tried (a haiku lost a tenth of its time to one); a
    GPU's cheap draft may."""
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        q8_0_on_2_cores = CostTable.given({1: 100.0, 2: 120.0, 4: 150.0, 8: 250.0}, 35.0)  # as the real pair measured
        unsure = target_row(engine.target.n_vocab, probability=0.5)
        chosen = {}
        for name, costs in (("cpu", q8_0_on_2_cores), ("gpu", CostTable.given(*GPU_LIKE))):
            controller = AutoDrafter(costs, ModelDrafter(engine.draft, lazy_start=True))
            controller.begin(0, [1, 2, 3])
            controller.observe_target(0, unsure)
            for _ in range(30):  # the draft losing where the target is unsure, often enough that only a try would ask it
                controller.model_acceptance.observe(1, 0)
            controller.exploration.saved_ms = 1e9  # a try is paid for: only hope decides
            chosen[name] = decide(controller, 8, Lookup()).source
        assert chosen == {"cpu": "none", "gpu": "model"}


def test_the_decode_loop_shows_auto_how_sure_the_target_is(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        controller = AutoDrafter(CostTable.given(GPU_LIKE[0], GPU_LIKE[1]), ModelDrafter(engine.draft, lazy_start=True))
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        controller.begin(0, prompt)
        assert controller.confidence.value is None
        run(Decoder(engine.target, controller), prompt, GenerationConfig(max_tokens=12, draft_max=4))
        assert controller.confidence.value is not None and 0.0 < controller.confidence.value <= 1.0


def test_auto_continues_a_short_sure_lookup_run_with_the_draft_model(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        controller = AutoDrafter(CostTable.given(GPU_LIKE[0], GPU_LIKE[1]), ModelDrafter(engine.draft, lazy_start=True))
        controller.begin(0, [1, 2, 3])
        for _ in range(40):  # both have been right: copies that agree this far, and the draft model
            controller.lookup_acceptance.observe(20, 8, 8)
            controller.model_acceptance.observe(8, 8)
        short = decide(controller, 8, Lookup([11, 12, 13], 20))  # the copy's source ends after three tokens
        assert (short.source, short.lookup_k, short.k, short.label) == ("hybrid", 3, 8, "hybrid K=3+5")
        assert decide(controller, 8, Lookup(list(range(11, 19)), 20)).source == "ngram"  # a full run: lookup alone, free
        assert decide(controller, 8, Lookup()).source == "model"  # no run: the model alone


def test_autos_hybrid_steps_are_lossless_on_tiny_models(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        assert engine.draft is not None
        prompt = chat_prompt_tokens(engine.target, [Message("user", REPEATING)])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=80))
        costs = CostTable.given(GPU_LIKE[0], GPU_LIKE[1])
        decoder = Decoder(engine.target, AlwaysHybrid(costs, ModelDrafter(engine.draft, lazy_start=True), lookups=Lookups(remember=False)))
        hybrid = run(decoder, prompt, GenerationConfig(max_tokens=80, draft_max=8, draft_p_min=0.0))
    assert_lossless(plain, hybrid, label="hybrid inside auto")
    steps = hybrid.finished.stats.decisions
    assert sum(n for label, n in steps.items() if label.startswith("hybrid K=")) >= 3, steps  # every step that found a run


# Verify costs as measured on the 2-core CI machine with the real target: every row of logits costs, so speculation must be sure.
CPU_VERIFY_MS = {1: 46.0, 2: 78.0, 3: 110.0, 4: 135.0, 5: 147.0, 6: 180.0, 8: 319.0}


def replay(controller: AutoDrafter, prompt: list[int], answer: list[int], k_cap: int = 8) -> list[tuple[int, int]]:
    """Drive the controller as the decode loop does, with `answer` as the target's text: (K, accepted) per step."""
    controller.begin(0, prompt)
    steps, position = [], 0
    while position < len(answer):
        draft = controller.propose([Ask(0, k_cap, 0.0)])[0]
        accepted = 0
        while accepted < len(draft.tokens) and position + accepted < len(answer) and draft.tokens[accepted] == answer[position + accepted]:
            accepted += 1
        controller.accept(0, answer[position : position + accepted + 1])
        controller.observe_step(len(draft.tokens) + 1, CPU_VERIFY_MS.get(len(draft.tokens) + 1, 400.0), 0.0)
        steps.append((len(draft.tokens), accepted))
        position += accepted + 1
    return steps


def test_the_controller_drafts_long_only_where_the_answer_copies_its_prompt():
    source = list(range(100, 300))  # no token repeats: every lookup hit is a real copy
    fresh = list(range(1000, 1100))
    steps = replay(AutoDrafter(CostTable.given(CPU_VERIFY_MS)), source, fresh + source[20:180] + fresh[::-1])
    drafted = [(k, accepted) for k, accepted in steps if k > 0]
    long_runs = [k for k, _ in drafted if k >= 3]
    assert len(long_runs) >= 20  # across the 160 copied tokens, drafting long
    assert sum(accepted for _, accepted in drafted) >= 0.8 * sum(k for k, _ in drafted)
    assert steps[:100] == [(0, 0)] * 100  # the fresh text before: nothing to copy, plain decoding
    assert sum(k for k, _ in steps[-60:]) <= 8  # and after: at most the one run that overshoots the copy's end


# A target whose batches cost little more than one token: a GPU, or a memory-bound target on a fast CPU.
CHEAP_BATCH_MS = {1: 20.0, 2: 21.0, 4: 22.0, 8: 24.0, 16: 28.0, 32: 36.0, 33: 37.0}


def test_on_a_cheap_batch_target_a_long_copy_is_drafted_far_past_8_and_drafting_stops_at_its_end():
    source = list(range(100, 400))
    fresh = list(range(1000, 1100))
    steps = replay(AutoDrafter(CostTable.given(CHEAP_BATCH_MS)), source, fresh + source[20:280] + fresh[::-1],
                   k_cap=AUTO_DRAFT_MAX)
    ends, position = [], 0  # where each step's text ends
    for _, accepted in steps:
        position += accepted + 1
        ends.append(position)
    before = [step for step, end in zip(steps, ends) if end <= 100]
    during = [step for step, end in zip(steps, ends) if 100 < end <= 360]
    after = [step for step, end in zip(steps, ends) if end > 360]
    assert before == [(0, 0)] * 100  # nothing to copy yet: plain decoding
    assert max(k for k, _ in during) >= 24 and len(during) <= 30  # 260 copied tokens in long strides, far past 8
    # After the copy: the one run that overshoots its end, then at most a short guess per token while the departure could
    # still be a rename (SMALL_EDIT tokens), then nothing.
    overshoot, *guesses = [k for k, _ in after if k]
    assert overshoot <= AUTO_DRAFT_MAX and len(guesses) <= SMALL_EDIT and all(k <= 2 for k in guesses)


def test_lookups_are_judged_even_on_the_steps_that_did_not_draft():
    controller = AutoDrafter(CostTable.given({1: 10.0, 2: 100.0, 3: 200.0}))  # verifying is so dear that it never drafts
    steps = replay(controller, list(range(100, 200)), list(range(100, 200)), k_cap=2)
    assert {k for k, _ in steps} == {0}
    lookup = controller.lookup_acceptance
    learned = [model for model in lookup.given.models() if model.tries]
    assert learned and all(model.hits == model.tries for model in learned)  # the copy was seen to match all along


def test_verify_costs_follow_the_machines_speed_and_learn_rare_sizes_quickly():
    costs = CostTable(PassCosts({1: 50.0, 4: 150.0}, {1: 3, 4: 3}))  # as a calibration of three repeats leaves it
    for _ in range(200):
        costs.observe_verify(1, 60.0)  # the machine got 20% slower; only single tokens are being timed
    assert costs.verify(1) == pytest.approx(60.0, rel=0.01) and costs.verify(4) == pytest.approx(180.0, rel=0.01)
    for _ in range(4):
        costs.observe_verify(4, 240.0)  # a batch of 4 turns out dearer than calibrated
    assert costs.verify(4) == pytest.approx((3 * 180.0 + 4 * 240.0) / 7, rel=1e-3)  # a plain mean with the calibration's three runs
    costs.observe_verify(4, 1000.0)  # a spike (another process took the CPU): not this batch's cost
    assert costs.verify(4) == pytest.approx((3 * 180.0 + 4 * 240.0) / 7, rel=1e-3)
    costs.observe_verify(4, 240.0)
    costs.observe_verify(1, 200.0)  # single tokens spike twice in a row: still noise
    costs.observe_verify(1, 200.0)
    assert costs.verify(1) == pytest.approx(60.0, rel=0.01)


def test_past_the_largest_size_timed_a_pass_grows_at_least_as_a_token_adds_on_average():
    """The real Q4_K_M target's calibration on a 2-core Xeon: 8 and 16 tokens nearly alike. Along their slope 33
    tokens priced 4.1 one-token passes; a pass of 33 then took 7.5."""
    lumpy = PassCosts({1: 72.8, 2: 112.0, 4: 112.0, 8: 248.0, 16: 264.0})
    average = (264.0 - 72.8) / 15
    assert lumpy.cost(33) == pytest.approx(264.0 + 17 * average) and lumpy.cost(33) > 6 * lumpy.cost(1)
    assert lumpy.cost(12) == pytest.approx(256.0)  # between sizes timed, still interpolated
    steep = PassCosts({1: 3.3, 8: 3.5, 16: 5.0})  # a GPU's: flat, then dearer as the batch fills it
    assert steep.cost(32) == pytest.approx(5.0 + 16 * (5.0 - 3.5) / 8)


def test_a_pass_after_another_size_teaches_the_change_not_the_size():
    """llama.cpp reuses a context's graph only for a pass of its last one's size: on a GPU a change cost 2-3 ms beside
    3.7 ms a token, and learned into the sizes' costs it made every K but the last look dear."""
    costs = CostTable(PassCosts({1: 4.0, 3: 4.5}, {1: 3, 3: 3}))
    for _ in range(20):
        costs.observe_verify(3, 7.0, switched=True)
    assert costs.verify(3) == 4.5 and costs.target.switch_ms == pytest.approx(2.5)
    assert costs.target.switch(3, 3) == 0.0 and costs.target.switch(1, 3) == pytest.approx(2.5) and costs.target.switch(None, 3) == 0.0
    costs.observe_verify(1, 40.0, switched=True)  # a size's first pass (kernels loaded): at most a pass's own cost
    assert costs.target.switch_ms < 2.5 + 4.0 / 21


def test_a_run_of_slow_passes_is_the_new_cost_not_noise():
    """Every pass 2x the estimate or more was ignored as a spike, so a machine that stayed slower (another job took
    its cores), or an estimate timed at a lucky moment, was never corrected, and auto priced its choices on costs
    off by 9x."""
    costs = CostTable(PassCosts({1: 80.0, 4: 170.0}, {1: 30, 4: 3}))
    for _ in range(3):
        costs.observe_verify(1, 700.0)
    assert costs.verify(1) == pytest.approx(700.0) and costs.verify(4) == pytest.approx(170.0 * 700 / 80)
    costs.observe_verify(1, 720.0)  # from there on, learned as usual
    assert 700.0 < costs.verify(1) < 720.0


def test_acceptance_is_learned_per_position_and_forgets_slowly():
    model = AcceptanceModel(prior=0.5)
    for _ in range(50):
        model.observe(n_drafted=3, n_accepted=1)  # the first token survives, the second never
    assert model.rate(0) > 0.9 and model.rate(1) < 0.1
    assert model.expected_accepted(3) == pytest.approx(model.rate(0) * (1 + model.rate(1) * (1 + model.rate(2))))


def test_make_draft_writes_a_gguf_that_loads_passes_the_pair_check_and_drafts(tiny, tmp_path):
    from localspec.engine.llama.model import Model
    from tests.conftest import cli

    out = tmp_path / "self.gguf"
    done = cli("make-draft", "--layers", "1", str(tiny["target"]), str(out))
    assert done.returncode == 0, done.stderr
    assert "the first 1 of 2 blocks" in done.stdout
    with Model(out) as made:
        assert made.n_layer == 1 and made.n_vocab > 0
    with Engine(EngineConfig(tiny["target"], out)) as engine:  # the pair check runs on load
        stats = drafter_stats(engine, "model")
        prompt = chat_prompt_tokens(engine.target, [Message("user", REPEATING)])
        assert_lossless(run(engine.plain, prompt, GenerationConfig(max_tokens=80)),
                        run(engine.speculative, prompt, GenerationConfig(max_tokens=80, draft_max=6)))
    assert stats.draft_n > 0 and stats.n_steps > 0
    again = cli("make-draft", "--layers", "1", str(tiny["target"]), str(out))
    assert again.returncode == 2 and "already exists" in again.stderr  # a path given on the command line: a usage error
    bad = cli("make-draft", "--layers", "2", str(tiny["target"]), str(tmp_path / "x.gguf"))
    assert bad.returncode == 2 and "between 1 and 1" in bad.stderr and not (tmp_path / "x.gguf").exists()  # the user's value
    typo = cli("make-draft", "--layers", "1", str(tiny["target"]), str(tmp_path / "no-such" / "folder" / "x.gguf"))
    assert typo.returncode == 2 and "is not an existing folder" in typo.stderr and not (tmp_path / "no-such").exists()


class RecordingCosts(CostTable):
    """A cost table that keeps every draft pass it is taught, (tokens, ms), to show what the controller measures."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.draft_lessons: list[tuple[int, float]] = []

    def observe_draft(self, table: PassCosts, n: int, ms: float, switched: bool = False) -> None:
        self.draft_lessons.append((n, ms))
        super().observe_draft(table, n, ms, switched)


def test_autos_draft_passes_teach_the_cost_of_their_own_size(tiny):
    """The first draft after a lazy start reads the whole prompt in one catch-up: it teaches what a pass that long costs,
    and leaves the one-token cost alone (taught as a per-token cost, it held auto off the draft model after plain stretches)."""
    with Engine(EngineConfig(tiny["talkative"], tiny["talkative"])) as engine:
        assert engine.draft is not None
        given = CostTable.given(*GPU_LIKE)  # costs where the draft model always wins, left free to learn
        costs = RecordingCosts(given.target, given.draft)
        controller = AutoDrafter(costs, ModelDrafter(engine.draft, lazy_start=True))
        for model in controller.draft_acceptance.models:  # known to be always right, however sure the target is: it is the target
            for _ in range(20):
                model.observe(8, 8)
        long_prompt = chat_prompt_tokens(engine.target, [Message("user", " ".join(["tell me everything"] * 150))])
        assert len(long_prompt) > 1000
        run(Decoder(engine.target, controller), long_prompt, GenerationConfig(max_tokens=40, draft_max=8, draft_p_min=0.0))
    (first_n, first_ms), later = costs.draft_lessons[0], costs.draft_lessons[1:]
    one_token = sorted(ms for n, ms in later if n == 1)
    assert first_n > len(long_prompt) - 1 and len(one_token) >= 3
    assert costs.draft is not None and costs.draft.cost(1) < 3 * one_token[len(one_token) // 2] < first_ms, costs.draft_lessons


def test_every_draft_pass_teaches_autos_draft_cost_what_it_took(tiny, monkeypatch):
    """A K=1 ask is its catch-up pass alone, its token chosen from that pass's row: the lesson is the whole ask, the
    decode and the choice (sampling, the p-min test), at the catch-up's size. A clock that moves 7 ms in each draft
    decode and 1 ms in each choice of a draft token, and nowhere else, says exactly what each lesson must be."""
    from localspec.engine.drafters import draft_model

    clock = [0]

    def advance(ms: int, function):
        def timed(*args, **kwargs):
            clock[0] += ms * 1_000_000
            return function(*args, **kwargs)
        return timed

    monkeypatch.setattr(time, "perf_counter_ns", lambda: clock[0])
    monkeypatch.setattr(draft_model, "greedy_with_confidence", advance(1, draft_model.greedy_with_confidence))
    with Engine(EngineConfig(tiny["talkative"], tiny["talkative"])) as engine:
        assert engine.draft is not None
        given = CostTable.given(*GPU_LIKE)  # the draft model always wins
        costs = RecordingCosts(given.target, given.draft, fixed=True)
        model = ModelDrafter(engine.draft)
        engine.draft._decode_entries = advance(7, engine.draft._decode_entries)  # type: ignore[method-assign]
        controller = AutoDrafter(costs, model)
        prompt = chat_prompt_tokens(engine.target, [Message("user", "Tell me a story.")])
        asked: list[tuple[int, int]] = []  # (tokens the draft had to read, ns the ask took)
        ask = model.draft

        def recorded(*args, **kwargs):
            pending, start = model.pending_tokens(0), clock[0]
            try:
                return ask(*args, **kwargs)
            finally:
                asked.append((pending, clock[0] - start))

        model.draft = recorded  # type: ignore[method-assign]
        run(Decoder(engine.target, controller), prompt, GenerationConfig(max_tokens=30, draft_max=1, draft_p_min=1e-9))
    assert len(costs.draft_lessons) == len(asked) >= 5  # one pass per ask, and each one taught...
    for (n, lesson), (pending, ns) in zip(costs.draft_lessons, asked):
        assert n == pending  # ...at the size it read...
        assert lesson == ns / 1e6 == 8.0  # ...what the ask took: its decode and its token's choice


def test_auto_prices_a_catch_up_by_the_drafts_own_batches_spread_over_the_steps_it_resumes(tiny):
    """After a plain stretch the draft reads what it missed in one pass. A Q4_K_M draft's batches scale worse than a
    Q8_0 target's; priced by the target's scale, the draft model looked cheap there and was asked at a loss. Charged
    whole to one step, though, a catch-up a little dearer than a target step kept a draft that wins on code from ever
    resuming: it is paid once for the steps that follow."""
    verify = {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 14.0}  # cheap target batches
    choices = {}
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        # the draft's 16-token pass: cheap, dearer than a target step but worth it, far too dear
        for name, sixteen in (("cheap", 1.5), ("resumable", 12.0), ("dear", 120.0)):
            controller = AutoDrafter(CostTable(PassCosts(dict(verify)), PassCosts({1: 1.0, 16: sixteen}), fixed=True),
                                     ModelDrafter(engine.draft, lazy_start=True))
            asked_before(controller.planner)
            controller.begin(0, list(range(1, 17)))  # sixteen tokens the draft has yet to read
            assert controller.model is not None and controller.model.pending_tokens(0) == 16
            choices[name] = decide(controller, 1, Lookup()).source
    assert choices == {"cheap": "model", "resumable": "model", "dear": "none"}


def test_a_catch_up_is_spread_over_the_asks_that_resumes_have_bought(tiny):
    """Writing code, a resume of the draft buys dozens of asks, and its catch-up is worth paying; editing code, lookup
    takes the step back after an ask or two, and each resume reads the copied text again for one ask (on a Q8_0 target
    that made code edits 5-15% slower than lookup alone). The same catch-up is taken in the first case, not the second."""
    verify = {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 14.0}
    decisions, spreads = {}, {}
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        assert engine.draft is not None
        for name, asks_per_resume in (("writing code", 30), ("editing code", 1)):
            controller = AutoDrafter(CostTable(PassCosts(dict(verify)), PassCosts({1: 1.0, 16: 12.0}), fixed=True),
                                     ModelDrafter(engine.draft, lazy_start=True))
            asked_before(controller.planner)
            for _ in range(6):
                controller.resume_runs.asked(missed=40)  # a resume after a long stretch the draft did not draft...
                for _ in range(asks_per_resume - 1):
                    controller.resume_runs.asked(missed=2)  # ...then asks with a token or two to read
            controller.begin(0, list(range(1, 17)))  # a new answer: sixteen tokens the draft has yet to read...
            for _ in range(10):
                controller.resume_runs.step(copied=False)  # ...where lookup has taken no step
            spreads[name] = controller.resume_runs.expected
            decisions[name] = decide(controller, 1, Lookup()).source
    assert spreads["editing code"] < 2 < 15 < spreads["writing code"]
    assert decisions == {"writing code": "model", "editing code": "none"}


def test_a_resume_is_expected_to_buy_no_more_asks_than_lookup_leaves_the_draft():
    """Resumes that bought 30 asks each (writing code) say little of an answer where lookup takes most steps (an edit):
    there a resumed draft keeps about as many steps as lookup leaves it before it falls behind again. A new answer's
    first resume reads the whole prompt, so it waits until the answer's first steps show which it is."""
    from localspec.engine.drafters.auto.catch_up import ResumeRuns

    runs = ResumeRuns()
    for _ in range(6):
        runs.asked(missed=40)
        for _ in range(29):
            runs.asked(missed=2)
    runs.new_answer()
    assert runs.learned > 20
    assert runs.expected <= 2  # a new answer: whether it rewrites or writes anew, its first steps will tell
    for _ in range(10):
        runs.step(copied=False)
    assert runs.expected > 15  # new code: lookup copied in none of them
    for copied in (True, True, False, True):  # then lookup copied in three steps of four
        runs.step(copied)
    assert runs.expected < 3
    runs.new_answer()
    for _ in range(10):  # a rewrite's first lines: lookup finds a source every step, and breaks at each renamed name
        runs.step(copied=False, sourced=True)
    assert runs.expected <= 2  # not new code: a resume that reads the prompt still waits for the copy to show


def test_autos_costs_are_measured_once_per_pair_and_machine_then_read_back(tiny, tmp_path):
    """The first token once waited for a full calibration on every load (10 s idle, up to 71 s busy, with the real pair)."""
    from localspec.engine.tuning import CALIBRATION_SIZES

    config = EngineConfig(tiny["target"], tiny["near"], cost_cache_dir=tmp_path)
    with Engine(config) as first:
        before = first.target.n_decoded
        auto = first.decoder("auto")
        assert first.target.n_decoded - before == 3 * sum(CALIBRATION_SIZES)  # a few short passes: each size untimed, then twice
        prompt = chat_prompt_tokens(first.target, [Message("user", REPEATING)])
        run(auto, prompt, GenerationConfig(max_tokens=40, draft_max=8))
        learned = auto.drafter.costs
    assert len(list(tmp_path.glob("*.json"))) == 1
    with Engine(config) as second:
        before = second.target.n_decoded
        costs = second.decoder("auto").drafter.costs
        assert second.target.n_decoded == before  # read back: not one pass timed
        assert costs == learned and costs.draft is not None and not costs.fixed
    with Engine(EngineConfig(tiny["target"], tiny["same"], cost_cache_dir=tmp_path)) as other_draft:
        before = other_draft.target.n_decoded
        other_draft.decoder("auto")
        assert other_draft.target.n_decoded > before  # another pair: its own measurement


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


def test_a_pair_where_the_answer_broke_a_copy_is_expected_to_break_again_until_it_holds():
    points = EditPoints()
    points.settle([1])
    points.watch([2, 3, 4, 5, 6, 7])
    points.settle([2, 3, 4, 5, 99])  # the copy held to 5, then the answer wrote 99 where it proposed 6
    judged = points.judge([8, 5, 6, 9])  # after 99: pairs (99, 8), (8, 5), (5, 6), (6, 9)
    assert judged.hazards[2] > 0.3 and judged.hazards[:2] == [0.0, 0.0] and judged.hazards[3] == 0.0
    rates = judged.apply([0.9] * 4)
    assert rates[2] < 0.6 and rates[0] == rates[1] == rates[3] == 0.9  # no break has repeated yet: nothing to spare
    for _ in range(12):  # then the pair held, copy after copy
        points.watch([5, 6])
        points.settle([5, 6, 1])
    assert points.judge([5, 6]).hazards[1] <= FLAGGED


def lost_positions(steps: list[tuple[int, int]]) -> list[int]:
    """The answer positions where a replay's drafts (K, accepted) lost a token."""
    lost_at, position = [], 0
    for k, accepted in steps:
        if accepted < k:
            lost_at.append(position + accepted)
        position += accepted + 1
    return lost_at


def test_an_edit_that_recurs_at_the_same_spot_is_not_drafted_across_once_it_has_broken_there():
    """Type hints: each signature's copy breaks after its first parameter, where the answer inserts the annotation. Once
    that pair has broken a copy twice, auto drafts each later copy up to it and not past it (on a CPU a lost draft costs)."""
    def_, open_, first, comma, second, close, annotation = 10, 11, 12, 13, 14, 15, 16

    def function(i: int, annotated: bool) -> list[int]:
        return [def_, 100 + i, open_, first, *([annotation] if annotated else []), comma, second, close, *range(200 + 20 * i, 212 + 20 * i)]

    source = [token for i in range(8) for token in function(i, False)]
    answer = [token for i in range(8) for token in function(i, True)]
    steps = replay(AutoDrafter(CostTable.given(CPU_VERIFY_MS)), source, answer)
    edits = {20 * i + 4 for i in range(8)}  # where each annotation is written
    lost_at = lost_positions(steps)
    assert not [at for at in lost_at if at in edits and at >= 40], (steps, lost_at)


def test_a_place_where_the_answer_varies_its_own_repeated_lines_is_not_drafted_across():
    """Test cases the answer writes itself: each line copies the one before but for its argument, a new value every
    line, so the pair the copy proposes there (the last line's value) is new each time while the place is not. Once
    copies have broken there twice, auto drafts each later line up to its argument and not past it."""
    assert_, call, open_, close, equals, true, end = 10, 11, 12, 13, 14, 15, 16

    def line(i: int) -> list[int]:
        return [assert_, call, open_, 100 + i, close, equals, true, end]

    answer = [token for i in range(16) for token in line(i)]
    steps = replay(AutoDrafter(CostTable.given(CPU_VERIFY_MS)), list(range(500, 540)), answer)
    arguments = {8 * i + 3 for i in range(16)}
    lost_at = lost_positions(steps)
    assert [at for at in lost_at if at in arguments and at >= 8 * 4] == [], (steps, lost_at)
    assert sum(accepted for _, accepted in steps) >= 40  # the rest of each line is still drafted
