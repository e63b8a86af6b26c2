"""The batch scheduler on the real pair at temperature 0: five requests over four slots, each the target's own text."""

from __future__ import annotations

from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.batch_runs import run_batch
from tests.conftest import run
from tests.lossless import assert_lossless
from tests.test_real_pair import MAX_TOKENS, NEAR_TIE, PROMPTS, prompt_for


def test_slots_at_once_each_write_the_targets_text(real_models):
    target, draft = real_models
    with Engine(EngineConfig(target, draft, n_ctx=4 * 1024)) as engine:
        prompts = [prompt_for(engine, text) for text in PROMPTS]
        config = GenerationConfig(max_tokens=MAX_TOKENS)
        alone = [run(engine.plain, prompt, config) for prompt in prompts]
        scheduler = engine.batch(4)
        drafters = ["model", "auto", "ngram", "model", "auto"]
        results = run_batch(scheduler, [(prompt, GenerationConfig(max_tokens=MAX_TOKENS, draft_max=4), engine.drafter(drafter))
                                        for prompt, drafter in zip(prompts, drafters)])
        for i, (expected, got) in enumerate(zip(alone, results)):
            assert_lossless(expected, got.run, NEAR_TIE, label=f"prompt {i} ({drafters[i]})")
        assert sum(r.run.finished.stats.draft_n_accepted for r in results) > 0
        for slot in scheduler.slots:
            assert engine.target.cells_held(slot.seq) == len(slot.cached)
