"""Prompt lookup and the adaptive controller: lossless on real llama.cpp, and choosing as the costs say."""

from __future__ import annotations

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.controller import AcceptanceModel, AutoDrafter, CostTable
from localspec.engine.decode import Decoder, GenerationConfig
from localspec.engine.drafter import ModelDrafter
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.ngram import NgramDrafter
from tests.conftest import run

# Costs shaped like a large target on a GPU: verifying 16 tokens costs little more than one, drafting is cheap.
GPU_LIKE = {1: 20.0, 2: 20.5, 4: 21.0, 8: 22.0, 16: 24.0}, 1.0
# ...and like this 2-core CPU with the real pair: batches cost nearly what their tokens cost one by one.
CPU_LIKE = {1: 60.0, 2: 100.0, 4: 200.0, 8: 400.0, 16: 600.0}, 30.0


def test_prompt_lookup_continues_the_latest_earlier_occurrence():
    drafter = NgramDrafter(n_min=2, n_max=3)
    drafter.start([5, 6, 7, 8, 1, 5, 6, 7, 9, 5, 6])
    assert drafter.match(3) == [7, 9, 5]  # (5, 6) last seen before the end at index 6: 7, 9, 5 follow
    drafter.commit(0, 7)
    assert drafter.match(2) == [9, 5]  # now (5, 6, 7): its latest earlier occurrence is followed by 9
    drafter.start([1, 2, 3])
    assert drafter.match(4) == []  # nothing repeats yet
    with pytest.raises(ValueError):
        NgramDrafter(n_min=3, n_max=2)


@pytest.mark.parametrize("draft_name", ["same", "near", "unrelated"])
def test_every_drafter_is_lossless_on_tiny_models(tiny, draft_name):
    with Engine(EngineConfig(tiny["target"], tiny[draft_name])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "the cat sat on the mat; the cat sat on the mat")])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
        for drafter in ("model", "ngram", "auto"):
            out = run(engine.decoder(drafter), prompt, GenerationConfig(max_tokens=60, draft_max=8))
            assert out.tokens == plain.tokens, drafter
        assert sum(out.finished.stats.decisions.values()) == out.finished.stats.n_steps  # auto reports every choice


def auto_decisions(target, draft, tokens: int, costs: tuple[dict[int, float], float]) -> dict[str, int]:
    """Real models and real acceptance; the costs are given (tiny models cost the same as their drafts)."""
    with Engine(EngineConfig(target, draft)) as engine:
        assert engine.draft is not None
        decoder = Decoder(engine.target, AutoDrafter(CostTable(dict(costs[0]), costs[1], fixed=True), ModelDrafter(engine.draft)))
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything")])
        result = run(decoder, prompt, GenerationConfig(max_tokens=tokens, draft_max=8))
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=tokens))
        assert result.tokens == plain.tokens
        return result.finished.stats.decisions


def test_the_controller_drafts_long_when_drafts_always_match(tiny):
    decisions = auto_decisions(tiny["talkative"], tiny["talkative"], 400, GPU_LIKE)
    long_steps = sum(n for label, n in decisions.items() if label.startswith("draft-model K=") and int(label.split("=")[1]) >= 6)
    assert long_steps >= 0.8 * sum(decisions.values()), decisions


def test_the_controller_stops_drafting_when_drafts_never_match(tiny):
    decisions = auto_decisions(tiny["target"], tiny["unrelated"], 400, CPU_LIKE)
    assert decisions.get("none", 0) >= 0.8 * sum(decisions.values()), decisions


def test_a_draft_too_slow_for_its_target_is_never_tried():
    slow_draft = CostTable(verify_ms={1: 10.0, 2: 19.0, 4: 38.0}, draft_ms_per_token=9.0, fixed=True)
    controller = AutoDrafter(slow_draft, model=None)
    controller.acceptance["ngram"] = AcceptanceModel(prior=0.0)
    for _ in range(200):
        assert controller.decide(4, lookup=[]).drafter == "none"


def test_acceptance_is_learned_per_position_and_forgets_slowly():
    model = AcceptanceModel(prior=0.5)
    for _ in range(50):
        model.observe(n_drafted=3, n_accepted=1)  # the first token survives, the second never
    assert model.rate(0) > 0.9 and model.rate(1) < 0.1
    assert model.expected_accepted(3) == pytest.approx(model.rate(0) * (1 + model.rate(1) * (1 + model.rate(2))))
