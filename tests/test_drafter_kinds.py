"""Every drafter the registry lists is lossless on tiny models; what hybrid, hierarchical and tree add to lookup and the draft model."""

from __future__ import annotations

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.drafters.registry import DRAFTERS, Part
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import run
from tests.drafting import REPEATING, drafter_stats
from tests.lossless import assert_lossless


@pytest.mark.parametrize("draft_name", ["same", "near", "unrelated"])
def test_every_drafter_is_lossless_on_tiny_models(tiny, tmp_path, draft_name):
    with Engine(EngineConfig(tiny["target"], tiny[draft_name], self_draft_dir=tmp_path)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", REPEATING)])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
        for drafter in [d for d, row in DRAFTERS.items() if row.drafts and not row.requires & {Part.MTP_LAYERS, Part.EAGLE3_HEAD}]:  # test_mtp, test_eagle3
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
