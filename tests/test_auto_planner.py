"""auto's choice of lookup runs, driven as the decode loop drives it: how far it drafts a copy, and where it does not."""

from __future__ import annotations

from localspec.engine.defaults import AUTO_DRAFT_MAX
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import Ask
from localspec.engine.drafters.edits import SMALL_EDIT
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable
from tests.drafting import CHEAP_BATCH_MS, CPU_VERIFY_MS, decide, replay


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
