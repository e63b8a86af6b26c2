"""auto with a draft model, on tiny models: when it asks the draft, and what it learns of the draft's acceptance."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.drafters.auto.acceptance import AcceptanceModel
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import Ask, PromptRead, TargetRow
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.ngram import Lookup, Lookups
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable
from tests.conftest import run
from tests.drafting import CPU_LIKE, GPU_LIKE, REPEATING, asked_before, decide
from tests.forced_choices import AlwaysHybrid
from tests.lossless import assert_lossless


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
        eager.observe(PromptRead(0, len(prompt)))  # the target read the prompt: an eager draft reads along
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


def test_acceptance_is_learned_per_position_and_forgets_slowly():
    model = AcceptanceModel(prior=0.5)
    for _ in range(50):
        model.observe(n_drafted=3, n_accepted=1)  # the first token survives, the second never
    assert model.rate(0) > 0.9 and model.rate(1) < 0.1
    assert model.expected_accepted(3) == pytest.approx(model.rate(0) * (1 + model.rate(1) * (1 + model.rate(2))))


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
        controller.observe(TargetRow(0, sure))
        assert controller.model_acceptance.rate(0) > 0.85  # still believed, and asked first...
        controller.exploration.saved_ms = 1e9  # ...though its first ask reads the prompt, a try the budget pays for here
        asks = []
        for _ in range(16):
            draft = controller.propose([Ask(0, 4, 1.0)])[0]  # p-min 1: the draft is never that sure
            asks.append(draft.choice is not None and draft.choice.source == "model")
            controller.accept(0, [prompt[-1]])
            controller.observe(TargetRow(0, sure))
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
            controller.observe(TargetRow(0, unsure))
        unsure_prior = controller.model_acceptance.rate(0)
        for _ in range(4):
            controller.observe(TargetRow(0, sure))
        for _ in range(30):
            controller.model_acceptance.observe(8, 8)
        sure_rate = controller.model_acceptance.rate(0)
        for token in range(10, 16):
            draft = controller.propose([Ask(0, 4, 1.0)])[0]  # p-min 1: the draft offers nothing
            assert draft.choice is not None and draft.choice.source == "model"
            controller.accept(0, [token])  # the target's own token, a new one each time: still no lookup run
            controller.observe(TargetRow(0, sure))
        assert controller.model_acceptance.rate(0) < sure_rate
        for _ in range(4):
            controller.observe(TargetRow(0, unsure))
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
            controller.observe(TargetRow(0, unsure))
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
