"""Several slots in one batch: each request's output is what it is alone, cancelled slots free their answers' cells,
nothing is lost.

The scheduler runs real llama.cpp on the tiny models (the real pair: tests/test_batch_real.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine import prompt_passes
from localspec.engine.chat import Message, chat_prompt_tokens, raw_prompt_tokens
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import PromptTooLongError
from localspec.engine.events import StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable
from localspec.engine.sampling import SamplingParams, distribution
from tests.batch_runs import Collected, run_batch
from tests.conftest import run
from tests.lossless import NEAR_TIE_TINY, assert_lossless

PROMPTS = ["tell me something", "hello there", "the theater", "in the other room", "are there trees", "hi", "a", "one more"]
LONG = "in the other room there are trees, and the theater is over there; " * 6  # several prompt passes long (prompt_passes)
DRAFTERS = ["auto", "model", "ngram", "none", "hybrid", "hierarchical", "self"]  # every drafter that runs in a batch


def prompts(engine: Engine) -> list[list[int]]:
    return [chat_prompt_tokens(engine.target, [Message("user", text)]) for text in PROMPTS]


@pytest.fixture(scope="module")
def alone_long(tiny):
    """LONG's prompt and its greedy answer alone: a prompt long enough for its cells to be reused (prompt_passes)."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", LONG)])
        assert len(prompt) >= 2 * prompt_passes.MIN_PASS
        return prompt, run(engine.plain, prompt, GenerationConfig(max_tokens=40))


@pytest.fixture(scope="module")
def alone(tiny):
    """Each prompt's greedy answer from the one-sequence decoder: what every slot must reproduce."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        return [run(engine.plain, prompt, GenerationConfig(max_tokens=40)) for prompt in prompts(engine)]


@pytest.mark.parametrize("n_slots", [1, 3, 8])
def test_each_slot_writes_what_its_request_writes_alone(tiny, alone, n_slots, tmp_path):
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192, self_draft_dir=tmp_path)) as engine:
        scheduler = engine.batch(n_slots)
        jobs = [(prompt, GenerationConfig(max_tokens=40, draft_max=4), engine.drafter(DRAFTERS[i % len(DRAFTERS)]))
                for i, prompt in enumerate(prompts(engine))]
        results = run_batch(scheduler, jobs)
        drafted = 0
        for i, (expected, got) in enumerate(zip(alone, results)):
            assert_lossless(expected, got.run, label=f"prompt {i} ({jobs[i][2].name}) with {n_slots} slots")
            drafted += got.run.finished.stats.draft_n
        assert drafted > 0  # speculation happened in the batch
        for slot in scheduler.slots:  # every sequence's cells are exactly what the slot says it holds
            assert engine.target.cells_held(slot.seq) == len(slot.cached)


def test_one_target_pass_per_step_for_every_slot(tiny):
    """Four slots generating: each step is ONE target decode (the batch), not one per slot."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(4)
        jobs = [(prompt, GenerationConfig(max_tokens=30, draft_max=3), engine.drafter("model")) for prompt in prompts(engine)[:4]]
        calls = []
        original = engine.target.decode_sequences
        engine.target.decode_sequences = lambda entries, *fork: calls.append({seq for _, _, seq, _ in entries}) or original(entries, *fork)
        run_batch(scheduler, jobs)
        assert max(len(seqs) for seqs in calls) == 4  # all four slots' tokens rode in one pass
        draft_calls = []
        original_draft = engine.draft.decode_sequences
        engine.draft.decode_sequences = lambda entries: draft_calls.append({seq for _, _, seq, _ in entries}) or original_draft(entries)
        run_batch(scheduler, jobs)
        assert max(len(seqs) for seqs in draft_calls) == 4  # and the draft drafted all four together


def test_a_cancelled_slot_frees_its_answers_cells_keeps_its_prompt_and_the_others_do_not_change(tiny, alone, alone_long):
    """A client that leaves takes its answer's cells with it at once; its prompt's stay as the slot's cache (editors cancel
    at every keystroke, and the next request shares the file), and that request reads only a last full pass again."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(4)
        texts = prompts(engine)[:4]
        texts[0] = alone_long[0]  # first: read alone, so its cells may serve a later prompt (prompt_passes)
        jobs = [(prompt, GenerationConfig(max_tokens=40, draft_max=3), engine.drafter("auto")) for prompt in texts]
        held = []

        def leave(step: int, collected: list[Collected]) -> None:
            if collected[0].cancel.is_set() and len(held) == 1:  # the step after the client left: its answer's cells are gone
                held.append(engine.target.cells_held(scheduler.slots[0].seq))
            elif not held and engine.target.cells_held(scheduler.slots[0].seq) > len(texts[0]) + 2:  # answering
                held.append(engine.target.cells_held(scheduler.slots[0].seq))
                collected[0].cancel.set()

        results = run_batch(scheduler, jobs, leave)
        prompt, slot = jobs[0][0], scheduler.slots[0]
        assert held[0] > len(prompt) and held[1] == len(prompt)  # it had answered; now only the prompt is left
        assert slot.cached == prompt
        assert engine.draft.cells_held(slot.seq) == len(engine.draft.cells.tokens[slot.seq])  # the draft's record holds (no leak)
        assert results[0].run.finished.reason is StopReason.CANCELLED
        for i in (1, 2, 3):
            assert_lossless(alone[i], results[i].run, label=f"prompt {i} beside a cancelled slot")
        again = run_batch(scheduler, [jobs[0]])[0].run
        reused = prompt_passes.reusable_prefix(len(prompt) - 1, len(prompt) - 1, len(prompt))
        assert again.finished.stats.cache_n == reused > len(prompt) // 2  # the cancelled request's prompt, found in its slot
        assert_lossless(alone_long[1], again, label="the cancelled prompt, asked again")


def test_a_request_shares_the_cells_of_a_busy_slot_that_holds_its_prompt(tiny, alone_long):
    """An autocomplete request comes while the one before it still runs: it borrows that slot's cells for the shared
    prefix (reads only a last full pass) and both write what they write alone; every slot's cells match its bookkeeping."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(4)
        (prompt, answer), config = alone_long, GenerationConfig(max_tokens=40, draft_max=3)
        reused = prompt_passes.reusable_prefix(len(prompt) - 1, len(prompt) - 1, len(prompt))
        first, second = Collected(), Collected()
        busy = scheduler.add(first.request(prompt, config, engine.drafter("auto")))
        for _ in range(3):
            scheduler.step()
        assert busy.busy and len(busy.cached) > len(prompt)  # generating
        borrower = scheduler.add(second.request(prompt, config, engine.drafter("model")))
        assert borrower is not busy and borrower.cached == prompt[:reused] and reused > len(prompt) // 2
        while scheduler.busy:
            scheduler.step()
            for slot in scheduler.slots:
                assert engine.target.cells_held(slot.seq) == len(slot.cached)
        assert second.run.finished.stats.cache_n == reused
        assert_lossless(answer, first.run, label="the slot that lent its cells")
        assert_lossless(answer, second.run, label="the slot that borrowed them")


def test_a_request_that_names_its_drafter_gets_it_beside_auto_slots(tiny, alone):
    """auto's planner chooses for auto's slots only: beside two auto slots whose costs make the draft model a loss, a
    request that named `model` still drafts its K on every step its answer leaves room for."""
    dear_draft = CostTable.given({1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 14.0}, draft_ms_per_token=30.0)
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(3, dear_draft)
        config = GenerationConfig(max_tokens=40, draft_max=3, draft_p_min=0.0)
        names = ["model", "auto", "auto"]
        results = run_batch(scheduler, [(prompt, config, engine.drafter(name)) for prompt, name in zip(prompts(engine), names)])
    for i, name in enumerate(names):
        assert_lossless(alone[i], results[i].run, label=f"prompt {i} ({name})")
    named = results[0].run.finished.stats
    assert named.draft_n >= 3 * (named.n_steps - 3), (named.draft_n, named.n_steps)  # K each step but the last few


def test_a_tree_in_several_slots_drafts_its_chains_without_forks(tiny, alone):
    """Several slots leave no sequence for a tree's fork (the doors refuse such a drafter with the registry's words):
    the engine's batch drafts its main chains alone, and each answer is still the target's."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(2, CostTable.given({1: 10.0, 2: 10.5, 4: 11.0}))
        config = GenerationConfig(max_tokens=40, draft_max=4, draft_p_min=0.0)
        results = run_batch(scheduler, [(prompt, config, engine.drafter("tree")) for prompt in prompts(engine)[:2]])
    for i in range(2):
        assert_lossless(alone[i], results[i].run, label=f"prompt {i} (tree, two slots)")
        assert results[i].run.finished.stats.n_forks == 0 and results[i].run.finished.stats.draft_n > 0


def test_a_burst_of_fifty_requests_over_eight_slots(tiny, tmp_path):
    """All complete, each once, with its own answer; afterwards each slot's cells are exactly its prompt cache."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192, self_draft_dir=tmp_path)) as engine:
        scheduler = engine.batch(8)
        base = prompts(engine)
        jobs = [(base[i % len(base)] , GenerationConfig(max_tokens=5 + i % 7, draft_max=3), engine.drafter(DRAFTERS[i % len(DRAFTERS)]))
                for i in range(50)]
        results = run_batch(scheduler, jobs)
        assert all(r.finished is not None and r.error is None for r in results)
        assert [r.run.finished.stats.predicted_n for r in results] == [
            len(r.run.tokens) for r in results]
        for i, r in enumerate(results):
            assert r.run.finished.reason in (StopReason.MAX_TOKENS, StopReason.EOS)
            if r.run.finished.reason is StopReason.MAX_TOKENS:
                assert len(r.run.tokens) == jobs[i][1].max_tokens
        assert not scheduler.busy
        for slot in scheduler.slots:
            assert engine.target.cells_held(slot.seq) == len(slot.cached) <= scheduler.share
            assert engine.draft.cells_held(slot.seq) == len(engine.draft.cells.tokens[slot.seq])
        # prompts shorter than a pass are read whole, whatever their slot holds (prompt_passes)
        assert all(len(base[i % len(base)]) < prompt_passes.MIN_PASS for i in range(50))
        assert all(r.run.finished.stats.cache_n == 0 for r in results)


def test_a_prompt_too_long_for_its_slot_is_refused_and_the_others_go_on(tiny, alone):
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=1024)) as engine:
        scheduler = engine.batch(4)  # 256 tokens a slot
        first = Collected()
        scheduler.add(first.request(prompts(engine)[0], GenerationConfig(max_tokens=40), engine.drafter("model")))
        scheduler.step()
        long_prompt = raw_prompt_tokens(engine.target, "the theater " * 120)
        with pytest.raises(PromptTooLongError, match="a slot holds 256"):
            scheduler.add(Collected().request(long_prompt, GenerationConfig(), engine.drafter("model")))
        while scheduler.busy:
            scheduler.step()
        assert_lossless(alone[0], first.run, label="beside a refused prompt")


def test_a_new_request_joins_while_others_generate(tiny, alone):
    """Continuous batching: a request added mid-way starts at the next step, its long prompt read in chunks."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        scheduler = engine.batch(2)
        first = Collected()
        scheduler.add(first.request(prompts(engine)[0], GenerationConfig(max_tokens=40), engine.drafter("auto")))
        for _ in range(3):
            scheduler.step()
        emitted_before = len(first.events)
        long_prompt = raw_prompt_tokens(engine.target, "in the other room there are trees and " * 40)
        second = Collected()
        scheduler.add(second.request(long_prompt, GenerationConfig(max_tokens=10), engine.drafter("none")))
        scheduler.step()
        assert len(first.events) > emitted_before  # the first slot went on in the same step the new prompt began
        assert second.finished is None and 0 < len(scheduler.slots[1].cached) < len(long_prompt) - 1  # read in chunks
        while scheduler.busy:
            scheduler.step()
        assert_lossless(alone[0], first.run, label="beside a prompt being read")
        with Engine(EngineConfig(tiny["target"])) as plain:
            assert_lossless(run(plain.plain, long_prompt, GenerationConfig(max_tokens=10)), second.run, label="the late request")


def test_a_slots_first_token_comes_with_the_pass_that_reads_its_prompts_end(tiny):
    """The first token waits for no step of its own: the pass that reads the prompt's last token judges it."""
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        prompt = prompts(engine)[0]
        alone = run(engine.plain, prompt, GenerationConfig(max_tokens=12))
        scheduler = engine.batch(2)
        assert len(prompt) <= engine.target.n_batch  # read in one pass
        collected = Collected()
        scheduler.add(collected.request(prompt, GenerationConfig(max_tokens=12, draft_max=3), engine.drafter("model")))
        scheduler.step()
        assert [(e.token, e.step) for e in collected.events] == [(alone.tokens[0], 0)]
        while scheduler.busy:
            scheduler.step()
    assert_lossless(alone, collected.run, label="first token from the prompt's pass")


@pytest.mark.parametrize("drafter,repeating", [("model", False), ("ngram", True), ("auto", True), ("hybrid", True)])
def test_each_slot_keeps_the_target_distribution_with_other_slots_busy(tiny, drafter, repeating):
    """The engine's chi-square test (tests/test_sampling_distribution.py), its seeded requests run four at a time.
    Lookup (and auto, which takes lookup's free runs) needs a prompt that repeats: P, the target's continuation G, P.
    "hybrid" is auto with every step that finds a run pinned to hybrid (tests/forced_choices.py)."""
    from tests.goodness_of_fit import fit_p_value
    from tests.test_sampling_distribution import N_SEEDS, N_TOKENS, SAMPLING, SIGNIFICANCE, exact_joint

    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me something")])
        if repeating:
            base = raw_prompt_tokens(engine.target, "tell me something")
            prompt = base + run(engine.plain, base, GenerationConfig(max_tokens=10)).tokens + base[1:]
        expected = exact_joint(engine.target, prompt, SamplingParams(**SAMPLING))
        # Given costs (a GPU's: drafting pays), not timed ones: what auto drafts, and so this test's premise, must not
        # hang on how busy the machine is (under load auto once drafted 346 tokens in 3000 answers here).
        costs = CostTable.given({1: 3.3, 2: 3.4, 4: 3.5, 5: 3.63, 8: 3.9, 16: 4.5, 32: 6.0, 64: 9.0, 128: 15.0, 256: 28.0, 512: 55.0},
                                draft_ms_per_token=0.47)
        scheduler = engine.batch(4, costs)
        pinned = drafter == "hybrid"
        chosen = pinned_auto(engine) if pinned else engine.drafter(drafter)
        jobs = [(prompt, GenerationConfig(max_tokens=N_TOKENS, sampling=SamplingParams(**SAMPLING, seed=seed), draft_max=3,
                                          draft_p_min=0.0), chosen) for seed in range(N_SEEDS)]
        results = run_batch(scheduler, jobs)
    samples = [tuple(r.run.tokens) for r in results]
    assert sum(r.run.finished.stats.draft_n for r in results) > N_SEEDS
    if pinned:
        assert sum(n for r in results for label, n in r.run.finished.stats.decisions.items() if label.startswith("hybrid")) > N_SEEDS // 2
    kept = [sample for sample in samples if sample in expected]
    strays = [sample for sample in samples if sample not in expected]
    # A prompt read beside other slots' rows rounds its logits differently, and top-k's boundary can sit at a near-tie
    # (measured here: the 4th and 5th tokens 0.7% apart): such an answer leaves the single-pass support. Each stray must
    # be that, and rare; the rest must fit.
    assert len(strays) <= len(samples) // 100, strays[:10]
    with Engine(EngineConfig(tiny["target"], n_ctx=2048)) as engine:
        for sample in strays:
            assert boundary_gap(engine.target, prompt, sample, SamplingParams(**SAMPLING)) < NEAR_TIE_TINY, sample
    assert fit_p_value(kept, expected) > SIGNIFICANCE


def boundary_gap(model, prompt: list[int], sample: tuple[int, ...], params: SamplingParams) -> float:  # type: ignore[no-untyped-def]
    """Where `sample` leaves the support: the logit gap between its token and the last token top-k keeps there."""
    for i, token in enumerate(sample):
        sequence = [*prompt, *sample[:i]]
        model.prefill(sequence[:-1])
        row = np.array(model.decode([sequence[-1]], outputs=1)[0])
        if token not in distribution(row, params).ids.tolist():
            kept = np.sort(row)[::-1][params.top_k - 1]
            return float(kept - row[token])
    raise AssertionError(f"{sample} never leaves the support")


def test_an_answer_that_fills_its_slot_ends_clearly_and_stays_in_its_share(tiny, alone):
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=1024)) as engine:
        scheduler = engine.batch(4)  # 256 tokens a slot
        long_prompt = raw_prompt_tokens(engine.target, "the theater " * 25)
        results = run_batch(scheduler, [(long_prompt, GenerationConfig(max_tokens=1000, draft_max=4), engine.drafter("auto")),
                                        (prompts(engine)[0], GenerationConfig(max_tokens=40), engine.drafter("model"))])
        full = results[0].run.finished
        assert full.reason is StopReason.CONTEXT_FULL and "context is full (256 tokens)" in full.message
        # every token but the last emitted sits in the slot's cells (as in the one-sequence loop): the share is used to the end
        assert len(long_prompt) + len(results[0].run.tokens) == 256 + 1
        assert_lossless(alone[0], results[1].run, label="beside a slot that filled up")
        assert all(engine.target.cells_held(slot.seq) <= scheduler.share for slot in scheduler.slots)


def repeating_prompt(engine: Engine, text: str) -> list[int]:
    """P, the target's own continuation G, then P again: lookup finds runs (G) to copy, and hybrid continues them."""
    base = raw_prompt_tokens(engine.target, text)
    return base + run(engine.plain, base, GenerationConfig(max_tokens=10)).tokens + base[1:]


def pinned_auto(engine: Engine) -> AutoDrafter:
    """The engine's auto for the batch, its planner pinned to hybrid wherever a slot finds a run (tests/forced_choices.py)."""
    from tests.forced_choices import AlwaysHybridPlanner

    auto = engine.drafter("auto")
    assert isinstance(auto, AutoDrafter)
    auto.planner = AlwaysHybridPlanner(auto.costs, True)
    return auto


def test_hybrid_steps_in_the_batch_are_lossless(tiny):
    """Four auto slots, every step that finds a run pinned to hybrid (half the run, then the batched draft model from
    its end): each slot writes what plain decoding writes alone."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=8192)) as engine:
        prompts_ = [repeating_prompt(engine, text) for text in PROMPTS[:4]]
        expected = [run(engine.plain, prompt, GenerationConfig(max_tokens=40)) for prompt in prompts_]
        scheduler = engine.batch(4)
        auto = pinned_auto(engine)
        results = run_batch(scheduler, [(prompt, GenerationConfig(max_tokens=40, draft_max=6), auto) for prompt in prompts_])
    hybrid_steps = 0
    for i, (alone_, got) in enumerate(zip(expected, results)):
        assert_lossless(alone_, got.run, label=f"prompt {i}, hybrid in the batch")
        hybrid_steps += sum(n for label, n in got.run.finished.stats.decisions.items() if label.startswith("hybrid K="))
    assert hybrid_steps >= 4


def test_a_hybrid_steps_draft_model_continues_from_the_lookup_runs_end(tiny):
    """With the target as its own draft, the model's part of a hybrid step is the target's own text wherever the lookup
    part before it was accepted: every token judged is accepted. A draft that did not read the lookup tokens first
    (continuing from the wrong place) would be rejected."""
    with Engine(EngineConfig(tiny["target"], tiny["same"], n_ctx=8192)) as engine:
        prompts_ = [repeating_prompt(engine, text) for text in PROMPTS[:4]]
        scheduler = engine.batch(4)
        auto = pinned_auto(engine)
        run_batch(scheduler, [(prompt, GenerationConfig(max_tokens=40, draft_max=6, draft_p_min=0.0), auto) for prompt in prompts_])
        judged = [model for model in auto.planner.draft_acceptance.models if model.tries]  # by the target's confidence
    assert judged and sum(model.tries[0] for model in judged) > 1 and all(model.hits == model.tries for model in judged)
