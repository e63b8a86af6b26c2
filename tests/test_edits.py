"""Copies with edits: lookup following a copy past renames and insertions, and auto's bets past and across the edits."""

from __future__ import annotations

import pytest

from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.auto.edit_points import EditPoints
from localspec.engine.drafters.edits import RESUMED
from localspec.engine.drafters.ngram import Lookup, PromptLookup
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import FLAGGED, MATCH_CLASS_PRIORS
from tests.drafting import CHEAP_BATCH_MS, CPU_VERIFY_MS, decide, replay


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
