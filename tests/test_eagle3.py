"""The eagle3 drafter: an EAGLE-3 head drafts from three of the target's layers, through llama.cpp's own EAGLE-3
encoder and decoder, lossless; a head made for another target is refused.

The heads are tiny eagle3 GGUFs over a tiny four-block llama (tests/eagle3_models.py): one made to agree with a target
that repeats its last token, one that never does, and a random one over a random target.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localspec.engine.drafters.auto.choice import Source
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import PairMismatchError
from localspec.machine import llama_build
from tests import arch_models, eagle3_models
from tests.conftest import cli
from tests.eagle3_models import Head
from tests.head_runs import acceptance, lossless_alone_and_in_four_slots
from tests.tiny_models import CHAT_TEMPLATE


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eagle3")
    source = arch_models.write(root, "llama")
    repeats = eagle3_models.llama_target(source, root / "llama4-repeats.gguf", repeats=True)
    random = eagle3_models.llama_target(source, root / "llama4.gguf", repeats=False)
    return {"source": source, "repeats": repeats, "random target": random,
            **{head.value: eagle3_models.eagle3_head(random if head is Head.RANDOM else repeats, root / f"eagle3-{head.value}.gguf", head)
               for head in Head},
            "wide": eagle3_models.eagle3_head(repeats, root / "eagle3-wide.gguf", Head.AGREES, target_hidden_size=512)}


CASES = {Head.AGREES: ("repeats", 1.0, 1.0), Head.DISAGREES: ("repeats", 0.0, 0.0), Head.RANDOM: ("random target", 0.0, 0.3)}


@pytest.mark.parametrize("head", list(Head), ids=lambda head: head.value)
def test_greedy_eagle3_drafts_write_the_targets_own_answer_alone_and_in_four_slots(models, head):
    target, low, high = CASES[head]
    with Engine(EngineConfig(models[target], models[head.value], n_ctx=2048)) as engine:
        assert engine.draft is None and engine.eagle3 is not None and engine.eagle3.path == models[head.value]  # a head, no draft model
        alone, together = lossless_alone_and_in_four_slots(engine, "eagle3", f"the {head.value} head")
        assert low <= acceptance(alone) <= high and low <= acceptance(together) <= high


def test_auto_drafts_with_the_head_where_the_pairs_draft_is_one(models):
    with Engine(EngineConfig(models["repeats"], models[Head.AGREES.value], n_ctx=2048)) as engine:
        auto = engine.drafter("auto")
        assert auto.planner.model_source is Source.EAGLE3 and auto.costs.has_draft  # type: ignore[attr-defined]
        lossless_alone_and_in_four_slots(engine, "auto", "auto on the agreeing head")


def test_a_head_made_for_another_target_is_refused_by_check_and_at_load(models):
    """One that reads layers the target lacks (made for four blocks, the target has two), one whose rows are wider."""
    for target, head, words in ((models["source"], models[Head.AGREES.value], "reads target layers [1, 2, 3], but"),
                                (models["repeats"], models["wide"], "reads hidden states 512 wide")):
        checked = cli("check", "--target", str(target), "--draft", str(head))
        assert checked.returncode == 1 and words in checked.stderr and "EAGLE-3 head for another model" in checked.stderr
        with Engine(EngineConfig(target, head, n_ctx=512)) as engine, pytest.raises(PairMismatchError, match=re.escape(words)):
            engine.drafter("eagle3")
    fits = cli("check", "--target", str(models["repeats"]), "--draft", str(models[Head.AGREES.value]))
    assert fits.returncode == 0 and "an EAGLE-3 head made for a target of this shape" in fits.stdout


def test_the_bench_runs_llama_cpps_draft_eagle3_beside_the_eagle3_drafter(models, tmp_path):
    """The bench sets llama.cpp's own drafter of the same kind beside each drafter it benches (the registry's
    reference): for eagle3, llama-speculative-simple --spec-type draft-eagle3 with the head as its draft, from a build
    of the vendored sources (tests/test_gpu_check.py runs the same build for draft-simple and draft-mtp)."""
    target = eagle3_models.llama_target(models["source"], tmp_path / "chat.gguf", repeats=True, chat_template=CHAT_TEMPLATE)
    head = eagle3_models.eagle3_head(target, tmp_path / "head.gguf", Head.AGREES)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "story", "category": "chat", "prompt": "tell me a story"}\n')
    bin_dir = llama_build.ensure_built(lambda _stage: None)
    result = cli("bench", "--target", str(target), "--draft", str(head), "--drafters", "eagle3", "--prompts", str(prompts),
                 "--max-tokens", "16", "--rounds", "1", "--draft-max", "3", "--reference-p-min", "0", "--llama-cpp-bin", str(bin_dir),
                 timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    row = re.search(r"K=3: llama-speculative-simple draft-eagle3 \(p-min 0\.00\) +[\d.]+ tok/s \( *([\d.]+)% accepted\) +localspec eagle3", result.stdout)
    assert row is not None and float(row[1]) > 50, result.stdout[-2000:]  # llama.cpp's own EAGLE-3 agrees with the head too
