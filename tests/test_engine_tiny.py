"""The decode loop on tiny real GGUF models: lossless at temperature 0, exact statistics, clean stops."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from localspec.engine import prompt_passes
from localspec.engine.chat import Message, chat_prompt_tokens, raw_prompt_tokens
from localspec.engine.drafters.base import Ask, PromptRead
from localspec.engine.drafters.registry import Part
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import PromptTooLongError
from localspec.engine.events import Finished, StopReason, TokenSource
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.sampling import SamplingParams, distribution
from tests.conftest import run
from tests.lossless import assert_clear_of_ties, assert_lossless

PROMPTS = ["hello there", "write a function", "the quick brown fox", "in the beginning"]


@pytest.fixture(scope="module")
def engines(tiny):
    opened = {name: Engine(EngineConfig(tiny["target"], tiny[name])) for name in ("same", "unrelated", "near")}
    yield opened
    for engine in opened.values():
        engine.close()


def prompt_for(engine: Engine, text: str) -> list[int]:
    return chat_prompt_tokens(engine.target, [Message("user", text)])


@pytest.mark.parametrize("draft", ["same", "unrelated", "near"])
@pytest.mark.parametrize("draft_max", [1, 3, 4, 8])
@pytest.mark.parametrize("p_min", [0.0, 0.6])
def test_greedy_output_equals_plain_decoding(engines, draft, draft_max, p_min):
    engine = engines[draft]
    for text in PROMPTS:
        prompt = prompt_for(engine, text)
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=60, draft_max=0))
        spec = run(engine.speculative, prompt, GenerationConfig(max_tokens=60, draft_max=draft_max, draft_p_min=p_min))
        assert_lossless(plain, spec, label=f"{draft} K={draft_max} on {text!r}")
        if spec.tokens == plain.tokens:
            assert spec.text == plain.text


def test_p_min_cut_off_keeps_output_and_shortens_drafts(engines):
    engine = engines["near"]
    prompt = prompt_for(engine, PROMPTS[0])
    plain = run(engine.plain, prompt, GenerationConfig(max_tokens=80, draft_max=0))
    free = run(engine.speculative, prompt, GenerationConfig(max_tokens=80, draft_max=6, draft_p_min=0.0))
    cut = run(engine.speculative, prompt, GenerationConfig(max_tokens=80, draft_max=6, draft_p_min=0.9))
    assert_lossless(plain, cut)
    assert cut.finished.stats.draft_n / cut.finished.stats.n_steps < free.finished.stats.draft_n / free.finished.stats.n_steps


def test_identical_draft_is_always_accepted_and_never_redecoded(tiny):
    k, max_tokens = 4, 41  # the prompt's pass gives the first token, then K+1 per step: every step is a full draft
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        prompt = prompt_for(engine, PROMPTS[1])
        assert_clear_of_ties(run(engine.plain, prompt, GenerationConfig(max_tokens=max_tokens)))
        result = run(engine.speculative, prompt, GenerationConfig(max_tokens=max_tokens, draft_max=k, draft_p_min=0.0))
        draft_decoded = engine.draft.n_decoded - (len(prompt) - 1)
    stats = result.finished.stats

    assert result.finished.reason is StopReason.MAX_TOKENS
    assert stats.predicted_n == max_tokens
    assert stats.draft_n == stats.draft_n_accepted == k * stats.n_steps
    assert stats.acceptance_rate == 1.0
    assert stats.acceptance_by_position == [1.0] * k
    assert stats.tokens_per_step == k + 1
    sources = [e.source for e in result.events]
    assert sources == [TokenSource.TARGET] + ([TokenSource.ACCEPTED] * k + [TokenSource.BONUS]) * stats.n_steps
    # Each settled token passes through the draft exactly once; the very last one is never needed.
    assert draft_decoded == max_tokens - 1


def test_the_first_token_comes_with_the_prompts_pass_before_any_draft(engines):
    """An editor shows the first character as soon as the prompt is read: no draft is made, and no pass runs, first."""
    engine = engines["same"]
    decoder = engine.speculative
    passes_before = engine.target.n_decoded
    proposed = []
    propose = decoder.drafter.propose
    decoder.drafter.propose = lambda *args: proposed.append(1) or propose(*args)  # counts, and drafts as ever
    try:
        prompt = prompt_for(engine, PROMPTS[1])
        events = decoder.generate(prompt, GenerationConfig(max_tokens=20, draft_max=4, draft_p_min=0.0))
        first = next(events)
        assert first.source is TokenSource.TARGET and first.step == 0 and not proposed
        assert engine.target.n_decoded - passes_before <= len(prompt)  # the prompt, its last token included: nothing more
        rest = list(events)
    finally:
        del decoder.drafter.propose
    assert proposed and rest[-1].stats.draft_n > 0  # speculation starts with the second token


def test_unrelated_draft_is_almost_never_accepted(engines):
    engine = engines["unrelated"]
    config = GenerationConfig(max_tokens=120, draft_max=4, draft_p_min=0.0)  # no cut-off: every step drafts
    stats = run(engine.speculative, prompt_for(engine, PROMPTS[2]), config).finished.stats
    assert stats.draft_n > 100
    assert stats.acceptance_rate < 0.1


def test_statistics_add_up(engines):
    engine = engines["near"]
    result = run(engine.speculative, prompt_for(engine, PROMPTS[3]), GenerationConfig(max_tokens=100, draft_max=4))
    stats = result.finished.stats
    sources = [e.source for e in result.events]
    assert 0 < stats.draft_n_accepted < stats.draft_n
    assert sources.count(TokenSource.ACCEPTED) == stats.draft_n_accepted
    # every step ends on one token of the target's own: a correction, a bonus, or (no draft) a plain one; the first
    # token is the target's own too, judged on the prompt's pass
    assert sources[0] is TokenSource.TARGET and len(sources) - sources.count(TokenSource.ACCEPTED) == stats.n_steps + 1
    assert sum(stats.draft_n_per_pos) == stats.draft_n
    assert sum(stats.n_acc_tokens_per_pos) == stats.draft_n_accepted
    assert stats.predicted_n == len(result.tokens) == 100
    assert stats.tokens_per_step == pytest.approx((stats.draft_n_accepted + stats.n_steps) / stats.n_steps)
    assert sum(v["n"] for v in stats.to_dict()["verify_ms_by_batch"].values()) == stats.n_steps
    assert stats.t_draft_ms + stats.t_verify_ms <= stats.predicted_ms
    assert stats.prompt_n == len(prompt_for(engine, PROMPTS[3]))


@pytest.mark.parametrize("drafter", ["none", "model", "auto"])
def test_every_token_event_carries_the_answers_statistics(engines, drafter):
    """The app reads the statistics from the events (issue 48): when an event arrives they already count it and its
    step, and auto's choices arrive with them; the Finished event carries the same statistics."""
    engine = engines["near"]
    counted, events = 0, []
    for event in engine.decoder(drafter).generate(prompt_for(engine, PROMPTS[1]), GenerationConfig(max_tokens=40, draft_max=4)):
        if isinstance(event, Finished):
            assert all(e.stats is event.stats for e in events) and event.stats.predicted_n == counted == 40
            break
        counted += event.token >= 0
        events.append(event)
        assert event.stats.predicted_n >= counted and event.stats.n_steps == event.step
        assert sum(event.stats.decisions.values()) == (event.step if drafter == "auto" else 0)


def test_plain_decoding_reports_target_tokens_only(engines):
    engine = engines["near"]
    result = run(engine.plain, prompt_for(engine, PROMPTS[0]), GenerationConfig(max_tokens=30))
    stats = result.finished.stats
    assert {e.source for e in result.events} == {TokenSource.TARGET}
    assert stats.n_steps == 29 and stats.draft_n == 0 and stats.tokens_per_step == 1.0  # the first came with the prompt


def test_stop_string_ends_generation_before_it(engines):
    engine = engines["near"]
    prompt = prompt_for(engine, PROMPTS[0])
    full = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
    stop = full.text[20:23]
    result = run(engine.speculative, prompt, GenerationConfig(max_tokens=60, draft_max=4, stop=(stop,)))
    assert result.finished.reason is StopReason.STOP_STRING
    assert result.text == full.text[: full.text.index(stop)]


def test_cancel_flag_stops_between_steps(engines):
    engine = engines["near"]
    cancel = threading.Event()
    events = []
    for event in engine.speculative.generate(prompt_for(engine, PROMPTS[1]), GenerationConfig(max_tokens=500, draft_max=4), cancel):
        events.append(event)
        if len(events) == 5:
            cancel.set()
    assert events[-1].reason is StopReason.CANCELLED
    assert len(events) - 1 < 5 + 4 + 1  # at most the rest of the step that was running


def test_full_context_stops_with_a_message(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=64)) as engine:
        prompt = prompt_for(engine, PROMPTS[0])
        result = run(engine.speculative, prompt, GenerationConfig(max_tokens=500, draft_max=4))
        assert result.finished.reason is StopReason.CONTEXT_FULL
        assert "context is full" in result.finished.message
        assert len(prompt) + result.finished.stats.predicted_n >= engine.target.n_ctx
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=500))
        assert_lossless(plain, result)


def test_prompt_longer_than_context_is_refused(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"], n_ctx=32)) as engine:
        n_ctx = engine.target.n_ctx  # llama.cpp may round the size up
        prompt = raw_prompt_tokens(engine.target, "x" * (n_ctx + 10))
        with pytest.raises(PromptTooLongError, match=f"context holds {n_ctx}"):
            list(engine.speculative.generate(prompt, GenerationConfig()))


def test_end_of_generation_token_stops(tmp_path, tiny):
    """A model whose EOS is a token the target emits mid-answer must stop right before it."""
    from tests.tiny_models import TinySpec, write_tiny_model

    with Engine(EngineConfig(tiny["target"])) as engine:
        prompt = prompt_for(engine, PROMPTS[0])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=40))
    assert_clear_of_ties(plain)  # the stop must fall exactly where plain decoding puts the EOS token
    reference = plain.tokens
    eos = reference[12]
    target = write_tiny_model(tmp_path / "t.gguf", TinySpec(seed=1, eos=eos))
    draft = write_tiny_model(tmp_path / "d.gguf", TinySpec(seed=3, base_seed=1, noise=0.1, eos=eos))
    with Engine(EngineConfig(target, draft)) as engine:
        result = run(engine.speculative, prompt, GenerationConfig(max_tokens=40, draft_max=4))
    assert result.finished.reason is StopReason.EOS
    assert result.tokens == reference[: reference.index(eos)]


def test_long_prompt_is_prefilled_in_batches_and_reused(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        prompt = raw_prompt_tokens(engine.target, "abc " * 400)  # > n_batch tokens
        assert len(prompt) > engine.target.n_batch
        first = run(engine.speculative, prompt, GenerationConfig(max_tokens=20, draft_max=3))
        decoded = engine.target.n_decoded
        again = run(engine.speculative, prompt, GenerationConfig(max_tokens=20, draft_max=3))
        assert again.tokens == first.tokens
        assert engine.target.n_decoded - decoded < 40 + prompt_passes.MIN_PASS + prompt_passes.ALIGN  # the prompt came from the cache
        assert_lossless(run(engine.plain, prompt, GenerationConfig(max_tokens=20)), again)


def test_draft_catches_up_after_many_plain_steps(tiny):
    """Steps without a draft leave tokens pending; the next draft feeds them all, in n_batch chunks."""

    from localspec.engine.drafters.draft_model import ModelDrafter
    from localspec.engine.llama.model import Model

    with Model(tiny["near"]) as model:
        drafter = ModelDrafter(model)
        prompt = raw_prompt_tokens(model, "hello")
        drafter.begin(0, prompt)
        settled = list(prompt)
        for i in range(model.n_batch + 100):
            assert drafter.propose([Ask(0, 0, 0.0)])[0].tokens == []
            token = 10 + i % 200
            drafter.accept(0, [token])
            settled.append(token)
        draft = drafter.propose([Ask(0, 3, 0.0)])[0]
        assert len(draft.tokens) == 3
        assert model.kv_tokens == settled + draft.tokens[:2]


def test_vetting_after_more_than_a_batch_of_pending_tokens_keeps_its_rows_aligned(tiny):
    """The hierarchical vet asks a row for each proposed token; with more than n_batch tokens pending, the last
    batch must still hold all of them (it once held the remainder only: too few rows, misaligned or an IndexError)."""

    from localspec.engine.drafters.draft_model import ModelDrafter
    from localspec.engine.llama.model import Model, ModelConfig

    settled_later = [10 + i for i in range(12)]  # with the prompt's last token, 13 pending: batches of 8, 8, 1
    with Model(tiny["target"]) as wide, Model(tiny["target"], ModelConfig(n_batch=8)) as narrow:
        prompt = raw_prompt_tokens(wide, "hello there")
        reference = ModelDrafter(wide)
        reference.begin(0, prompt)
        reference.observe(PromptRead(0, len(prompt)))  # as the target reads the prompt
        reference.accept(0, settled_later)
        proposal = reference.propose([Ask(0, 5, 0.0)])[0].tokens  # what the draft itself would say
        assert len(proposal) == 5
        vetting = ModelDrafter(narrow)
        vetting.begin(0, prompt)
        vetting.observe(PromptRead(0, len(prompt)))
        vetting.accept(0, settled_later)
        assert vetting.pending_tokens(0) + len(proposal) - 1 == 17 and narrow.n_batch == 8
        assert vetting.agreed_prefixes([(0, proposal)]) == [len(proposal)]
        assert narrow.kv_tokens == [*prompt, *settled_later, *proposal[:-1]]


def test_a_tree_near_a_full_context_ends_cleanly(tiny):
    """A fork takes cells of its own: near the end of the context the step drops it instead of overflowing the cache."""
    from localspec.engine.decode import Decoder
    from localspec.engine.drafters.draft_model import ModelDrafter
    from localspec.engine.drafters.tree import TreeDrafter
    from localspec.engine.llama.model import Model, ModelConfig

    with Model(tiny["talkative"], ModelConfig(n_ctx=256)) as target, Model(tiny["talkative_draft"], ModelConfig(n_ctx=256)) as draft:
        target.ensure_sequences(2)
        decoder = Decoder(target, TreeDrafter(ModelDrafter(draft), p_split=0.0))  # forks at every step
        prompt = chat_prompt_tokens(target, [Message("user", "tell me everything")])
        result = run(decoder, prompt, GenerationConfig(max_tokens=10_000, draft_max=4, draft_p_min=0.0))
        assert result.finished.reason == StopReason.CONTEXT_FULL
        assert result.finished.stats.n_forks > 0
        assert len(prompt) + result.finished.stats.predicted_n >= target.n_ctx - 1


def test_the_self_draft_stays_off_the_gpu_unless_a_plan_counted_it(tiny, tmp_path):
    """Loaded with the draft's layer count (None: every layer on the GPU), it took GPU memory no plan had seen."""
    with Engine(EngineConfig(tiny["target"], tiny["near"], self_draft_dir=tmp_path)) as engine:
        assert engine.part(Part.SELF_DRAFT).config.n_gpu_layers == 0
    with Engine(EngineConfig(tiny["target"], None, self_draft_dir=tmp_path, self_draft_gpu_layers=3)) as engine:
        assert engine.part(Part.SELF_DRAFT).config.n_gpu_layers == 3


def test_the_llama_cpp_log_is_rotated_before_it_grows_without_bound(tiny, tmp_path, monkeypatch):
    """About 400 KB a load, never rotated: 62 MB after one afternoon."""
    from localspec.engine.llama import llama_log
    from localspec.engine.llama.model import Model

    log = tmp_path / "llama.log"
    log.write_text("an old line\n" * 1000)
    for index in (1, 2, 3):
        log.with_name(f"llama.log.{index}").write_text(f"rotated {index}\n")
    monkeypatch.setattr(llama_log, "ROTATE_BYTES", 4000)
    with Model(tiny["target"]):  # the backend is up (its first start installs the default log)
        pass
    llama_log.install(log)
    try:
        with Model(tiny["target"]):
            pass
        assert log.with_name("llama.log.1").read_text().startswith("an old line")
        assert log.with_name("llama.log.2").read_text() == "rotated 1\n" and log.with_name("llama.log.3").read_text() == "rotated 2\n"
        assert not log.with_name("llama.log.4").exists()  # the oldest went
        assert "an old line" not in log.read_text()
    finally:
        llama_log.install()  # back to the suite's own log


def test_llama_cpp_logging_after_the_log_file_closed_prints_nothing_over_the_terminal(tiny, tmp_path):
    """At interpreter exit the log file can close before the last model is freed, and llama.cpp logs the free: a write
    there printed "Exception ignored ... I/O operation on closed file" and a traceback after a script's own error (seen
    with the real pair). Here the file is closed first, then a model loads and frees, logging as it goes."""
    script = (
        "from pathlib import Path\n"
        "from localspec.engine.llama import llama_log\n"
        "from localspec.engine.llama.model import Model\n"
        f"target = Path({str(tiny['target'])!r})\n"
        "with Model(target):\n"  # the backend is up (its first start installs the default log)
        "    pass\n"
        f"llama_log.install(Path({str(tmp_path / 'llama.log')!r}))\n"
        "llama_log._file.close()\n"
        "with Model(target):\n"
        "    pass\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr and "closed file" not in result.stderr, result.stderr


def test_a_cancelled_load_stops_inside_llama_cpp_and_keeps_nothing(tiny):
    """Issue 56: a cancel was checked only between the two models, so Ctrl+Q in the app waited out the whole load (17-41 s
    on a busy machine). llama.cpp's progress callback now stops it at the next tensor."""
    from localspec.engine.errors import LoadCancelled
    from localspec.engine.llama.model import Model

    stop = threading.Event()
    stop.set()
    with pytest.raises(LoadCancelled, match="cancelled"):
        Model(tiny["target"], cancel=stop)
    with pytest.raises(LoadCancelled):
        Engine(EngineConfig(tiny["target"], tiny["same"]), cancel=stop)  # before the target's weights, not after them
    Model(tiny["target"], cancel=threading.Event()).close()  # a cancel never set is no cancel


def test_a_pair_auto_ran_before_is_not_timed_again_at_load(tiny, tmp_path):
    """Issue 56: every start of the app spent 30+ s on "timing plain decoding…" on a busy machine, though auto's cost cache
    already held the plain step; the README said later loads time nothing."""
    from localspec.session.chat import plain_baseline_ms

    config = EngineConfig(tiny["target"], tiny["same"], cost_cache_dir=tmp_path)
    stages: list[str] = []
    with Engine(config) as engine:
        assert engine.known_plain_ms() is None
        assert plain_baseline_ms(engine, stages.append) > 0 and stages == ["timing plain decoding"]
        run(engine.decoder("auto"), raw_prompt_tokens(engine.target, "hello"), GenerationConfig(max_tokens=16))  # saves its costs
    stages.clear()
    with Engine(config) as engine:
        known = engine.known_plain_ms()
        assert known is not None and known > 0
        assert plain_baseline_ms(engine, stages.append) == known and stages == []  # nothing timed


def test_min_p_1_samples_only_the_top_token(engines):
    """Issue 75: min-p 1.0 was refused (llama.cpp takes it: only the tokens at the top probability stay). Sampled at a
    high temperature with any seed, with drafts or not, the answer is then the target's greedy one."""
    kept = distribution(np.array([0.5, 3.0, 2.9, -1.0], dtype=np.float32), SamplingParams(temperature=1.0, top_k=0, min_p=1.0))
    assert kept.ids.tolist() == [1] and kept.probs.tolist() == [1.0]
    engine = engines["near"]
    prompt = prompt_for(engine, "hello there")
    greedy = run(engine.plain, prompt, GenerationConfig(max_tokens=24))
    assert_clear_of_ties(greedy)
    for seed in range(4):
        sampling = SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=1.0, seed=seed)
        sampling.validate()
        for decoder in (engine.plain, engine.decoder("model")):
            assert run(decoder, prompt, GenerationConfig(max_tokens=24, sampling=sampling, draft_max=4)).tokens == greedy.tokens, seed
