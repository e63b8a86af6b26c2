"""The draft model's catch-up after a plain stretch: priced by the draft's own batches, spread over the asks a resume buys."""

from __future__ import annotations

from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.pass_costs import CostTable, PassCosts
from tests.drafting import asked_before, decide


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
