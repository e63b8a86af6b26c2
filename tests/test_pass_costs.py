"""auto's pass costs: how verify and draft passes are priced and learned, and kept per pair and machine (the cost cache)."""

from __future__ import annotations

import time

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable, PassCosts
from tests.conftest import run
from tests.drafting import GPU_LIKE, REPEATING


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
        learned = auto.drafter.measured().costs
    assert len(list(tmp_path.glob("*.json"))) == 1
    with Engine(config) as second:
        before = second.target.n_decoded
        costs = second.decoder("auto").drafter.measured().costs
        assert second.target.n_decoded == before  # read back: not one pass timed
        assert costs == learned and costs.draft is not None and not costs.fixed
    with Engine(EngineConfig(tiny["target"], tiny["same"], cost_cache_dir=tmp_path)) as other_draft:
        before = other_draft.target.n_decoded
        other_draft.decoder("auto")
        assert other_draft.target.n_decoded > before  # another pair: its own measurement
