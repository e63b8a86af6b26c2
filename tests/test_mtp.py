"""The mtp drafter: a target drafts with its own MTP layers, through llama.cpp's MTP context, lossless.

The targets are tiny Qwen3.5 models (hybrid: a recurrent block that rolls back through snapshots beside attention)
and a tiny MiMo-V2 (attention only), with an MTP block appended (tests/mtp_models.py): a random head, one made to
agree with its target, one that never does, and (Qwen3.5) one that agrees about half the time.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from localspec.engine import prompt_passes
from localspec.engine.decode import Decoder
from localspec.engine.drafters.auto.choice import Source
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.draft_model import ModelDrafter
from localspec.engine.drafters.mtp import MtpDrafter
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import EngineError
from localspec.engine.llama.memory import MemoryKind
from localspec.engine.pass_costs import CostTable, PassCosts
from localspec.engine.sampling import SamplingParams
from localspec.gguf.header import read_local_header
from localspec.machine.memory_plan import footprint
from tests import arch_models, mtp_models
from tests.batch_runs import run_batch
from tests.conftest import cli, run
from tests.goodness_of_fit import fit_p_value
from tests.head_runs import GREEDY, PROMPTS, acceptance, lossless_alone_and_in_four_slots
from tests.live_server import live_server
from tests.lossless import assert_lossless
from tests.mtp_models import Head
from tests.test_sampling_distribution import N_SEEDS, SAMPLING, SIGNIFICANCE, exact_joint, sample_with_drafts
from tests.tiny_models import CHAT_TEMPLATE


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> dict[Head, Path]:
    root = tmp_path_factory.mktemp("mtp")
    source = arch_models.write(root, "qwen35")
    return {head: mtp_models.with_mtp_blocks(source, root / f"qwen35-mtp-{head.value}.gguf", heads=(head,)) for head in Head}


ACCEPTED = {Head.AGREES: (0.95, 1.0), Head.NEAR: (0.2, 0.9), Head.DISAGREES: (0.0, 0.0), Head.RANDOM: (0.0, 0.2)}


@pytest.fixture(scope="module")
def attention_only(tmp_path_factory: pytest.TempPathFactory) -> dict[Head, Path]:
    """MTP heads on a tiny MiMo-V2 (attention only, a sliding-window block, a MoE block; its MTP block dense, with one
    fused q/k/v projection, as llama.cpp's MiMo-V2 MTP graph asks)."""
    root = tmp_path_factory.mktemp("mtp-mimo2")
    source = arch_models.write(root, "mimo2")
    return {head: mtp_models.with_mtp_blocks(source, root / f"mimo2-mtp-{head.value}.gguf", heads=(head,))
            for head in (Head.RANDOM, Head.AGREES, Head.DISAGREES)}


@pytest.mark.parametrize("head", [Head.RANDOM, Head.AGREES, Head.DISAGREES], ids=lambda head: head.value)
def test_an_attention_only_targets_mtp_head_drafts_losslessly_alone_and_in_four_slots(attention_only, head):
    low, high = ACCEPTED[head]
    with Engine(EngineConfig(attention_only[head], n_ctx=2048)) as engine:
        assert engine.target.memory is MemoryKind.ATTENTION and engine.mtp_layers == 1
        alone, together = lossless_alone_and_in_four_slots(engine, "mtp", f"mimo2, the {head.value} head")
        assert low <= acceptance(alone) <= high and low <= acceptance(together) <= high


@pytest.fixture(scope="module")
def chained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """MiMo-V2s with several MTP layers, layer i trained for draft position i (MiMo-V2-Flash and Step-3.5 ship theirs
    so): three heads that agree, two whose second never does, and two or three that agree now and then (each "near" head
    of one model the same block), beside one such head alone."""
    root = tmp_path_factory.mktemp("mtp-chained")
    source = arch_models.write(root / "source", "mimo2")
    kinds = {"agree": (Head.AGREES,) * 3, "second-disagrees": (Head.AGREES, Head.DISAGREES), "near": (Head.NEAR,) * 2,
             "one near": (Head.NEAR,), "three near": (Head.NEAR,) * 3}
    return {name: mtp_models.with_mtp_blocks(source, root / f"mimo2-mtp-{name}.gguf", heads=kinds[name]) for name in kinds}


def test_chained_heads_draft_a_position_each_losslessly_alone_and_in_four_slots(chained):
    """Three agreeing heads draft three tokens where four are asked, all accepted. Where the second head never agrees,
    every draft's first token holds and its second fails: the second position is the second head's, not the first
    head's run again (which agrees). Heads are made to agree without attending, so heads that do (near) show that each
    keeps its cells among other sequences' (llama.cpp's chain_heads keeps every layer in the same cells)."""
    with Engine(EngineConfig(chained["agree"], n_ctx=2048)) as engine:
        assert engine.mtp_layers == 3 and GREEDY.draft_max == 4
        alone, together = lossless_alone_and_in_four_slots(engine, "mtp", "three chained heads")
        assert acceptance(alone) == acceptance(together) == 1.0
        assert {len(r.finished.stats.draft_n_per_pos) for r in alone + together} == {3}
    with Engine(EngineConfig(chained["second-disagrees"], n_ctx=2048)) as engine:
        alone, together = lossless_alone_and_in_four_slots(engine, "mtp", "a second head that never agrees")
        for result in alone + together:
            stats = result.finished.stats
            assert stats.draft_n_per_pos[1] > 0 and stats.acceptance_by_position == [1.0, 0.0], stats.draft_n_per_pos
    # Heads whose own attention matters draft alike alone and beside three other sequences: each head's cells stay its own.
    with Engine(EngineConfig(chained["near"], n_ctx=2048)) as engine:
        alone, together = lossless_alone_and_in_four_slots(engine, "mtp", "two heads that agree now and then")
        for one, four in zip(alone, together):
            assert (one.finished.stats.n_acc_tokens_per_pos, one.finished.stats.draft_n_per_pos) == (
                four.finished.stats.n_acc_tokens_per_pos, four.finished.stats.draft_n_per_pos)


class RecordingMtp(MtpDrafter):
    """The mtp drafter, keeping every draft it proposes, by the prompt of the answer it drafts for."""

    def __init__(self, target) -> None:  # type: ignore[no-untyped-def]
        super().__init__(target)
        self.drafted: dict[tuple[int, ...], list[list[int]]] = {}
        self._prompts: dict[int, tuple[int, ...]] = {}

    def begin(self, seq, prompt) -> None:  # type: ignore[no-untyped-def]
        super().begin(seq, prompt)
        self._prompts[seq] = tuple(prompt)

    def propose(self, asks):  # type: ignore[no-untyped-def]
        drafts = super().propose(asks)
        for ask, draft in zip(asks, drafts):
            self.drafted.setdefault(self._prompts[ask.seq], []).append(list(draft.tokens))
        return drafts


def test_chained_copies_of_one_head_draft_what_that_head_drafts_alone(chained):
    """Three chained heads that are one block three times must draft, token for token, what that block drafts alone as
    a head run three times: head i's cells for the accepted text and for the draft so far are then exactly the lone
    head's. A head that missed the catch-up, or read the draft without its own attention, drafts otherwise."""
    config = replace(GREEDY, draft_max=3, max_tokens=60)
    drafted = {}
    for name in ("one near", "three near"):
        with Engine(EngineConfig(chained[name], n_ctx=2048)) as engine:
            alone, together = RecordingMtp(engine.target), RecordingMtp(engine.target)
            for prompt in PROMPTS:
                run(Decoder(engine.target, alone), prompt, config)
            run_batch(engine.batch(4), [(prompt, config, together) for prompt in PROMPTS])
            drafted[name] = (alone.drafted, together.drafted)
    assert sum(len(draft) == 3 for drafts in drafted["one near"][0].values() for draft in drafts) > 50
    assert drafted["three near"] == drafted["one near"]


def test_sampled_chained_heads_keep_the_targets_distribution(chained):
    """At T > 0 each position's token is drawn from its own head's distribution (q), and judged against it."""
    with Engine(EngineConfig(chained["near"], n_ctx=512)) as engine:
        prompt = PROMPTS[0]
        expected = exact_joint(engine.target, prompt, SamplingParams(**SAMPLING))
        samples, drafted = sample_with_drafts(engine.decoder("mtp"), prompt, "speculative", draft_max=3)
        assert drafted > N_SEEDS
        assert fit_p_value(samples, expected) > SIGNIFICANCE


def test_the_memory_plan_counts_every_chained_heads_cells(chained, tmp_path):
    """The head's context keeps cells for each of its layers: the plan's cells equal llama.cpp's log for both contexts."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = cli("generate", "--target", str(chained["agree"]), "--drafter", "mtp", "--raw", "--prompt", "hi", "--max-tokens", "4",
                 "--ctx-size", "1024", "--json", env=env)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)["device"]["plan"]["models"]["target"]
    log = (tmp_path / "state" / "localspec" / "log" / "llama.log").read_text()
    layers = re.findall(r"llama_kv_cache: size = .*cells,\s+(\d+) layers", log)
    mib = [float(v) for v in re.findall(r"CPU KV buffer size =\s+([\d.]+) MiB", log)]
    assert "3" in layers and planned["kv_bytes"] / 2**20 == pytest.approx(sum(mib), abs=0.02)


def test_auto_asks_chained_heads_for_no_more_tokens_than_they_draft(chained):
    """At a GPU's costs, three heads that always agree are worth asking for all they draft, and no more: auto prices the
    heads' K to three (priced as a head that drafts on, it asked for four and five), and its answer is the target's own."""
    with Engine(EngineConfig(chained["agree"], n_ctx=2048)) as engine:
        config, prompt = replace(GREEDY, max_tokens=60, draft_max=32), PROMPTS[2]
        auto = AutoDrafter(CostTable.given(GPU_VERIFY_MS, GPU_HEAD_MS), MtpDrafter(engine.target))
        result = run(Decoder(engine.target, auto), prompt, config)
        assert_lossless(run(engine.plain, prompt, config), result, label="auto on three chained heads")
    decisions = result.finished.stats.decisions
    asked = {int(label.split("K=")[1]) for label in decisions if label.startswith(Source.MTP.value)}
    assert asks(decisions, Source.MTP) >= 3 and max(asked) == 3, decisions


@pytest.mark.parametrize("head", list(Head), ids=lambda head: head.value)
def test_greedy_mtp_drafts_write_the_targets_own_answer_alone_and_in_four_slots(heads, head):
    low, high = ACCEPTED[head]
    with Engine(EngineConfig(heads[head], n_ctx=2048)) as engine:
        alone, together = lossless_alone_and_in_four_slots(engine, "mtp", f"the {head.value} head")
        assert low <= acceptance(alone) <= high and low <= acceptance(together) <= high


def test_a_next_turn_drafts_from_the_cells_its_first_answer_left(heads):
    """The second turn's prompt holds the first's prompt and answer: the head keeps their cells and the target's row at
    their end, so the agreeing head is as right from the first draft on as if it had read everything again."""
    prompt = [token for prompt in PROMPTS for token in prompt] * 6  # long enough for a snapshot to keep (prompt_passes)
    with Engine(EngineConfig(heads[Head.AGREES], n_ctx=2048)) as engine:
        first = run(engine.decoder("mtp"), prompt, GREEDY)
        turn = [*prompt, *first.tokens, 9, 17]
        again = run(engine.decoder("mtp"), turn, GREEDY)
        assert again.finished.stats.cache_n >= prompt_passes.MIN_PASS
        assert_lossless(run(engine.plain, turn, GREEDY), again, label="the next turn")
        assert acceptance([again]) >= 0.95


def test_a_head_made_before_the_target_reopens_its_context_opens_its_own_anew(attention_only):
    """A target that reopens its context for more sequences (a server's slots, a tree drafter) often gets the freed
    one's address back (this MiMo-V2's does): a head made before pairs by the context's serial, so it still opens its
    own for every slot."""
    with Engine(EngineConfig(attention_only[Head.AGREES], n_ctx=2048)) as engine:
        expected = [run(engine.plain, prompt, GREEDY) for prompt in PROMPTS]
        drafter = MtpDrafter(engine.target)  # beside the one-sequence context
        scheduler = engine.batch(4)
        assert not drafter.head.paired()  # whatever address the new context has
        together = [collected.run for collected in run_batch(scheduler, [(prompt, GREEDY, drafter) for prompt in PROMPTS])]
    for i, (plain, result) in enumerate(zip(expected, together)):
        assert_lossless(plain, result, label=f"prompt {i}, a head made before the slots")
    assert acceptance(together) >= 0.95


@pytest.mark.parametrize("head", [Head.NEAR, Head.DISAGREES], ids=lambda head: head.value)
def test_auto_drafts_with_the_head_where_no_draft_model_is_loaded_losslessly(heads, head):
    """auto's model source is the head (its passes timed at load as a draft model's are); whatever it chooses, each
    answer is the target's own, alone and in four slots."""
    with Engine(EngineConfig(heads[head], n_ctx=2048)) as engine:
        auto = engine.drafter("auto")
        assert auto.planner.model_source is Source.MTP and auto.costs.has_draft  # type: ignore[attr-defined]
        lossless_alone_and_in_four_slots(engine, "auto", f"auto on the {head.value} head")


# A GPU's shape (test_gpu_costs.py: the H200's target and draft model), with a head that costs a tenth of the draft model.
GPU_VERIFY_MS = {1: 3.3, 5: 3.63}
GPU_DRAFT_MS, GPU_HEAD_MS = 0.47, 0.05


def gpu_costs() -> CostTable:
    costs = CostTable.given(GPU_VERIFY_MS, GPU_DRAFT_MS)
    costs.head = PassCosts({n: GPU_HEAD_MS * ms / GPU_VERIFY_MS[1] for n, ms in GPU_VERIFY_MS.items()})
    return costs


def asks(decisions: dict[str, int], source: Source) -> int:
    """The steps whose tokens `source` drafted (a hybrid's count as the draft model's)."""
    sources = {Source.MODEL.value, Source.HYBRID.value} if source is Source.MODEL else {source.value}
    return sum(n for label, n in decisions.items() if label.split()[0] in sources)


def test_auto_with_a_draft_model_also_drafts_with_the_targets_head_where_it_agrees(heads):
    """A pair with a draft model whose target keeps MTP layers (the catalog's Qwen3.6 MTP pairs): auto prices both as
    sources of its model tokens (the head's passes timed at load beside the draft model's), and every answer is the
    target's own, alone and in four slots. At a GPU's costs, with the agreeing head and a random draft model, the
    steps that ask a model ask the head (the answer repeats itself, so lookup drafts much of it for free)."""
    with Engine(EngineConfig(heads[Head.AGREES], heads[Head.RANDOM], n_ctx=2048)) as engine:
        assert engine.draft is not None
        built = engine.drafter("auto")
        assert [source.source for source in built.planner.sources] == [Source.MODEL, Source.MTP]  # type: ignore[attr-defined]
        assert built.costs.head is not None and built.costs.head.ms  # type: ignore[attr-defined]
        lossless_alone_and_in_four_slots(engine, "auto", "auto with a draft model and the agreeing head")
        config, prompt = replace(GREEDY, max_tokens=120), PROMPTS[2]
        auto = AutoDrafter(gpu_costs(), ModelDrafter(engine.draft, lazy_start=True), head=MtpDrafter(engine.target))
        result = run(Decoder(engine.target, auto), prompt, config)
        assert_lossless(run(engine.plain, prompt, config), result, label="auto at a GPU's costs")
    decisions = result.finished.stats.decisions
    assert asks(decisions, Source.MTP) >= 3 and asks(decisions, Source.MODEL) <= asks(decisions, Source.MTP) / 4, decisions


@pytest.mark.parametrize("verification", ["speculative", "sample-match"])
def test_sampled_mtp_drafts_keep_the_targets_distribution(heads, verification):
    with Engine(EngineConfig(heads[Head.NEAR], n_ctx=512)) as engine:
        prompt = PROMPTS[0]
        expected = exact_joint(engine.target, prompt, SamplingParams(**SAMPLING))
        samples, drafted = sample_with_drafts(engine.decoder("mtp"), prompt, verification, draft_max=3)
        assert drafted > N_SEEDS
        assert fit_p_value(samples, expected) > SIGNIFICANCE


def test_a_target_without_mtp_layers_is_refused_with_what_to_do(heads, tmp_path):
    plain_target = arch_models.write(tmp_path, "qwen35")
    with Engine(EngineConfig(plain_target, n_ctx=512)) as engine, pytest.raises(EngineError, match="carries no MTP layers"):
        engine.drafter("mtp")


def test_the_server_drafts_with_the_head_and_reports_it_as_llama_cpp_does(heads, tmp_path):
    """A client asks for the mtp drafter on a server holding an MTP target (and two slots): the answer is plain
    decoding's, its timings carry llama.cpp's draft counts, and /metrics counts them."""
    prompt = PROMPTS[0]
    body = {"prompt": prompt, "n_predict": 30, "temperature": 0, "speculative.p_min": 0.0}
    with live_server(tmp_path, "--target", str(heads[Head.AGREES]), "--parallel", "2") as server:
        status, plain = server.request("POST", "/completion", {**body, "localspec": {"drafter": "none"}})
        assert status == 200, plain
        status, drafted = server.request("POST", "/completion", {**body, "localspec": {"drafter": "mtp"}})
        assert status == 200, drafted
        assert drafted["content"] == plain["content"]
        timings = drafted["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
        metrics = server.request("GET", "/metrics")[1]
        assert re.search(rf"^llamacpp:spec_decode_num_draft_tokens_total {timings['draft_n']}\b", metrics, re.MULTILINE), metrics
    with live_server(tmp_path, "--target", str(arch_models.write(tmp_path, "qwen35")), "--parallel", "2") as server:
        status, refused = server.request("POST", "/completion", {**body, "localspec": {"drafter": "mtp"}})
        assert status == 400 and "mtp drafter needs a target with MTP layers" in json.dumps(refused), refused


def test_the_memory_plan_counts_the_heads_cells_and_compute_buffer_as_llama_cpp_allocates_them(heads, tmp_path):
    """The head's context keeps the MTP block's cells (planned as an attention block's) and a compute buffer of its own,
    sized for HEAD_UBATCH tokens: the plan's bytes equal llama.cpp's log for both contexts."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = cli("generate", "--target", str(heads[Head.NEAR]), "--drafter", "mtp", "--raw", "--prompt", "hi", "--max-tokens", "4",
                 "--ctx-size", "1024", "--json", env=env)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)["device"]["plan"]["models"]["target"]
    log = (tmp_path / "state" / "localspec" / "log" / "llama.log").read_text()
    mib = [float(v) for v in re.findall(r"(?:CPU KV|CPU RS) buffer size =\s+([\d.]+) MiB", log)]
    assert len(mib) == 3  # the target's attention cells and recurrent states, then the head's cells
    assert planned["kv_bytes"] / 2**20 == pytest.approx(sum(mib), abs=0.02)
    head_compute = float(re.findall(r"sched_reserve:\s+CPU compute buffer size =\s+([\d.]+) MiB", log)[1])
    without_head = footprint([replace(header := read_local_header(heads[Head.NEAR]), metadata={
        key: value for key, value in header.metadata.items() if not key.endswith("nextn_predict_layers")})], 1024, "no head")
    assert (planned["compute_bytes"] - without_head.compute_bytes) / 2**20 == pytest.approx(head_compute, rel=0.03)


def test_the_bench_runs_the_head_and_refuses_what_the_pair_lacks(tmp_path):
    """On an MTP target with no draft model the bench runs mtp beside plain and auto, and refuses the drafters the pair
    cannot run (an EAGLE-3 head's) with what to do. (The sweep is named: the default one adds the self draft, which
    cut from this three-block model keeps only its recurrent block.)"""
    source = arch_models.write(tmp_path, "qwen35")
    target = mtp_models.with_mtp_blocks(source, tmp_path / "qwen35-mtp.gguf", heads=(Head.NEAR,), chat_template=CHAT_TEMPLATE)
    out = tmp_path / "bench.json"
    result = cli("bench", "--target", str(target), "--drafters", "mtp,ngram", "--draft-max", "2", "--only", "chat-git",
                 "--max-tokens", "16", "--json", str(out))
    assert result.returncode == 0, result.stderr
    labels = [mode["label"] for mode in json.loads(out.read_text())["modes"]]
    assert "mtp K=2" in labels and not any(label.startswith(("model", "eagle3")) for label in labels), labels
    refused = cli("bench", "--target", str(target), "--drafters", "eagle3")
    assert refused.returncode != 0 and "eagle3 needs an EAGLE-3 head" in refused.stderr


def test_a_self_draft_cut_from_an_mtp_target_keeps_no_mtp_layer(heads, tmp_path):
    """The target's MTP block comes after its last block, so a draft of its first blocks keeps none: its header says
    so (llama.cpp read the draft's last kept block as an MTP block and refused it)."""
    with Engine(EngineConfig(heads[Head.NEAR], n_ctx=512, self_draft_dir=tmp_path, self_draft_layers=2)) as engine:
        assert_lossless(run(engine.plain, PROMPTS[0], GREEDY), run(engine.decoder("self"), PROMPTS[0], GREEDY), label="self")
        cut = next(tmp_path.glob("*.first2.gguf"))
    assert read_local_header(cut).arch_value("nextn_predict_layers") == 0
