"""The families people run now, on tiny models llama.cpp's own writer made: hybrid and recurrent (Qwen3.5, LFM2,
Nemotron-H; Mamba), sliding-window (Gemma 3) and MoE (Qwen3-MoE) targets.

Where llama.cpp keeps snapshots of the recurrent state (n_rs_seq), drafts are verified and their rejected tokens rolled
back, at one slot and at four, and greedy output is the target's own. Where it keeps none (Mamba), the pair answers
with plain decoding and says why. A hybrid draft model, whose speculation cannot drop, reads its context again. A
window model keeps the small window cache, and a prefix is reused only where the window's cells are still there.
A target that carries MTP layers is named so by check and doctor.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from localspec import paths
from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.drafters.registry import Part
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.memory import CHECKPOINTS, RECURRENT_SNAPSHOTS, MemoryKind
from localspec.engine.pass_costs import CostTable
from localspec.engine.sampling import SamplingParams
from localspec.gguf.memory_kind import memory_kind
from localspec.hub.config import HubConfig
from localspec.machine.memory_plan import read_footprint
from tests import arch_models, mtp_models
from tests.app_pilot import Setup, local_pair, run_async, wait_for
from tests.batch_runs import run_batch
from tests.conftest import cli, run
from tests.goodness_of_fit import fit_p_value
from tests.live_server import live_server
from tests.lossless import assert_lossless
from tests.test_sampling_distribution import N_SEEDS, SAMPLING, SIGNIFICANCE, exact_joint, sample_with_drafts

HYBRIDS = ("qwen35", "lfm2", "nemotron_h")
FAMILIES = {"qwen35": MemoryKind.SNAPSHOTS, "lfm2": MemoryKind.SNAPSHOTS, "nemotron_h": MemoryKind.SNAPSHOTS,
            "gemma3": MemoryKind.ATTENTION, "qwen3moe": MemoryKind.ATTENTION}
DRAFTERS = ("model", "ngram", "hybrid", "auto")
PROMPTS = ("hello there friend", "the theater of trees", "once upon a time", "are there trees")
CONFIG = GenerationConfig(max_tokens=40, draft_max=4, draft_p_min=0.0)
COSTS = CostTable.given({1: 1.0, 8: 1.3, 32: 2.0})  # GPU-shaped: a verify of a few tokens costs about one, so auto drafts


@pytest.fixture(scope="module")
def archs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archs")
    return {arch: arch_models.write(root, arch) for arch in (*FAMILIES, "mamba", "llama")}


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_target_of_each_family_speculates_and_writes_its_own_greedy_answer(archs, arch):
    with Engine(EngineConfig(archs[arch], archs["llama"], n_ctx=1024)) as engine:
        assert engine.target.memory is FAMILIES[arch]
        if FAMILIES[arch] is MemoryKind.SNAPSHOTS:
            assert engine.target.draft_limit == RECURRENT_SNAPSHOTS
            assert f"rolls back at most {RECURRENT_SNAPSHOTS} tokens" in engine.drafting_note
        prompt = raw_prompt_tokens(engine.target, PROMPTS[0])
        plain = run(engine.plain, prompt, CONFIG)
        drafted = accepted = 0
        for name in DRAFTERS:
            speculative = run(engine.decoder(name), prompt, replace(CONFIG, draft_max=8 if name == "ngram" else 4))
            assert_lossless(plain, speculative, label=f"{arch} {name}")
            drafted += speculative.finished.stats.draft_n
            accepted += speculative.finished.stats.draft_n_accepted
        assert 0 < accepted < drafted  # drafts were accepted, and others rolled back


@pytest.mark.parametrize("arch", FAMILIES)
def test_four_slots_on_a_target_of_each_family_each_write_their_own_answer(archs, arch):
    with Engine(EngineConfig(archs[arch], archs["llama"], n_ctx=2048)) as engine:
        prompts = [raw_prompt_tokens(engine.target, text) for text in PROMPTS]
        alone = [run(engine.plain, prompt, CONFIG) for prompt in prompts]
        scheduler = engine.batch(4, COSTS)
        jobs = [(prompts[i % 4], CONFIG, engine.drafter(DRAFTERS[i // 2 % 4])) for i in range(8)]
        for i, collected in enumerate(run_batch(scheduler, jobs)):
            assert_lossless(alone[i % 4], collected.run, label=f"{arch} slot job {i} ({DRAFTERS[i // 2 % 4]})")
        assert sum(scheduler.slots[i].target.cells_held(i) for i in range(4)) > 0


def test_a_hybrid_draft_model_that_cannot_drop_its_speculation_reads_again(archs):
    with Engine(EngineConfig(archs["qwen35"], archs["nemotron_h"], n_ctx=1024)) as engine:
        assert engine.part(Part.TARGET_TOKENIZER).memory is MemoryKind.SNAPSHOTS  # but it drafts a token a pass: nothing to roll back to
        prompt = raw_prompt_tokens(engine.target, PROMPTS[1])
        plain = run(engine.plain, prompt, CONFIG)
        speculative = run(engine.decoder("model"), prompt, CONFIG)
        assert_lossless(plain, speculative, label="qwen35 with a nemotron_h draft")
        assert speculative.finished.stats.draft_n > speculative.finished.stats.draft_n_accepted


@pytest.mark.parametrize("arch", ["qwen35", "lfm2", "mamba"])
def test_a_recurrent_target_restores_a_checkpoint_for_a_prompt_that_shares_its_cache(archs, arch):
    """A chat's next turn holds the last one's prompt: the state saved where that prompt's reading ended is restored,
    and only the rest is read. A prompt that departs before any checkpoint is read whole. Both answer as fresh."""
    with Engine(EngineConfig(archs[arch], n_ctx=2048)) as engine:
        first = raw_prompt_tokens(engine.target, "the theater of trees " * 60)
        departing = first[:40] + raw_prompt_tokens(engine.target, " elsewhere")[1:] * 30
        engine.target.forget(0)
        turn = run(engine.plain, first, CONFIG)
        next_turn = first + turn.tokens + raw_prompt_tokens(engine.target, " and then?")[1:] * 20
        fresh = {}
        for name, prompt in (("next turn", next_turn), ("departing", departing)):
            engine.target.forget(0)
            fresh[name] = run(engine.plain, prompt, CONFIG)
        engine.target.forget(0)
        run(engine.plain, first, CONFIG)
        again = run(engine.plain, next_turn, CONFIG)
        assert_lossless(fresh["next turn"], again, label=f"{arch}, the next turn from a checkpoint")
        assert again.finished.stats.cache_n == len(first)  # where the first prompt's reading ended
        moved = run(engine.plain, departing, CONFIG)
        assert moved.tokens == fresh["departing"].tokens and moved.finished.stats.cache_n == 0


def test_a_recurrent_target_without_snapshots_answers_plainly_and_says_why(archs, tmp_path):
    with Engine(EngineConfig(archs["mamba"], archs["llama"], n_ctx=1024)) as engine:
        assert engine.target.memory is MemoryKind.RECURRENT and engine.target.draft_limit == 0
        prompt = raw_prompt_tokens(engine.target, PROMPTS[0])
        plain = run(engine.plain, prompt, CONFIG)
        for name in DRAFTERS:
            answer = run(engine.decoder(name), prompt, CONFIG)
            assert answer.tokens == plain.tokens and answer.finished.stats.draft_n == 0
    with live_server(tmp_path, "--target", str(archs["mamba"]), "--draft", str(archs["llama"]), "--parallel", "1") as server:
        props = server.request("GET", "/props")[1]["localspec"]
        assert props["memory"] == "recurrent" and "cannot roll back rejected tokens" in props["drafting_note"]
        assert "localspec serve: note: mamba" in server.log_text()
    result = cli("generate", "--raw", "--target", str(archs["mamba"]), "--draft", str(archs["llama"]), "--drafter", "model",
                 "--prompt", PROMPTS[0], "--max-tokens", "12", "--json")
    assert result.returncode == 0, result.stderr
    assert "cannot roll back rejected tokens" in result.stderr and "plain decoding" in result.stderr
    assert json.loads(result.stdout)["stats"]["draft_n"] == 0


def test_a_self_draft_of_a_hybrid_keeps_a_block_that_attends_or_is_refused(archs, tmp_path):
    """A cut of a hybrid whose blocks are all recurrent made llama.cpp abort the process on loading it (GGML_ASSERT(buffer):
    a cache of no cells). The tiny qwen35's first block is recurrent and its second attends, so of its two blocks no
    self draft can keep one that attends and leave one out: every door says so instead of aborting."""
    assert read_footprint(archs["qwen35"], 1024).cut_floor == 2 and read_footprint(archs["lfm2"], 1024).cut_floor == 1  # its first attends
    assert read_footprint(archs["llama"], 1024).cut_floor == 1 and read_footprint(archs["mamba"], 1024).cut_floor == 1
    for layers in ([], ["--self-layers", "1"]):
        result = cli("generate", "--raw", "--target", str(archs["qwen35"]), "--drafter", "self", *layers, "--prompt", PROMPTS[0],
                     "--max-tokens", "4")
        assert result.returncode == 2 and "No self-draft can be cut from" in result.stderr, (result.returncode, result.stderr[-2000:])
        assert "Traceback" not in result.stderr
    made = cli("make-draft", str(archs["qwen35"]), str(tmp_path / "cut.gguf"), "--layers", "1")
    assert made.returncode == 2 and "No self-draft can be cut from" in made.stderr and not (tmp_path / "cut.gguf").exists()


def test_a_window_model_keeps_the_small_cache_as_the_planner_counts_it(archs):
    n_ctx = 2048
    planned = read_footprint(archs["gemma3"], n_ctx)
    assert planned.block_kv_bytes[0] < planned.block_kv_bytes[1]  # the window block: its window and a batch, not n_ctx
    result = cli("generate", "--raw", "--target", str(archs["gemma3"]), "--no-draft", "--ctx-size", str(n_ctx),
                 "--prompt", "hello", "--max-tokens", "2")
    assert result.returncode == 0, result.stderr
    # llama.cpp's own account, a line per cache (the full one and the window's) of the context the process opened
    sizes = re.findall(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells", paths.llama_log_file().read_text())
    assert [int(cells) for _, cells in sizes[-2:]] == [n_ctx, 768]
    assert round(sum(float(mib) for mib, _ in sizes[-2:]) * 2**20) == planned.kv_bytes


@pytest.mark.parametrize("arch", [*HYBRIDS, "mamba"])
def test_a_recurrent_models_state_and_snapshots_are_planned_as_llama_cpp_allocates_them(archs, arch):
    """A recurrent block keeps a state per sequence in 1 + snapshots copies, not cells: the planner's memory for the
    model's blocks is llama.cpp's own account (a line for the attention cells, one for the recurrent states), and its
    checkpoints are what the engine saves."""
    n_ctx = 1024
    planned = read_footprint(archs[arch], n_ctx)
    assert read_footprint(archs[arch], n_ctx, n_seq=2).checkpoint_bytes == 2 * planned.checkpoint_bytes  # a state per slot
    result = cli("generate", "--raw", "--target", str(archs[arch]), "--no-draft", "--ctx-size", str(n_ctx),
                 "--prompt", "hello", "--max-tokens", "2")
    assert result.returncode == 0, result.stderr
    log = paths.llama_log_file().read_text()
    opened = log[log.rindex("llama_context: n_ctx ") :]  # the context the process opened
    states = [float(mib) for mib in re.findall(r"llama_memory_recurrent: size = +([\d.]+) MiB", opened)]
    cells = [float(mib) for mib in re.findall(r"llama_kv_cache: size = +([\d.]+) MiB", opened)]
    assert len(states) == 1 and (arch == "mamba") == (not cells)  # a window model's cells take two lines (full, window)
    assert abs(sum(states + cells) * 2**20 - planned.kv_bytes) <= 0.005 * 2**20 * len(states + cells)  # the log's 2 decimals
    with Engine(EngineConfig(archs[arch], n_ctx=n_ctx)) as engine:
        run(engine.plain, raw_prompt_tokens(engine.target, "the theater of trees " * 60), CONFIG)
        saved = engine.target.sequences.checkpoint_bytes(0)  # the prompt's one pass ended in a checkpoint
        windowed = engine.target.n_swa > 0
    if windowed:  # a hybrid with a window (LFM2) saves its window's cells too: the plan counts a full window cache's
        assert 0 < CHECKPOINTS * saved <= planned.checkpoint_bytes
    else:
        assert saved > 0 and abs(planned.checkpoint_bytes - CHECKPOINTS * saved) <= 0.01 * planned.checkpoint_bytes


def test_a_window_model_reuses_a_prefix_only_where_the_window_still_holds_it(archs):
    """A long answer's cache has let its oldest window cells go; a prompt that departs from it more than a window
    back is read again, one that shares most of it reuses it, and both answer as a fresh read does."""
    with Engine(EngineConfig(archs["gemma3"], archs["llama"], n_ctx=2048)) as engine:
        words = raw_prompt_tokens(engine.target, "the theater of trees and the river " * 130)
        first = words[:900]
        sharing = words[:850] + raw_prompt_tokens(engine.target, " a new end")[1:]
        departing = words[:100] + raw_prompt_tokens(engine.target, " elsewhere entirely")[1:]
        fresh = {}
        for name, prompt in (("sharing", sharing), ("departing", departing)):
            engine.target.forget(0)
            fresh[name] = run(engine.plain, prompt, CONFIG)
        engine.target.forget(0)
        run(engine.decoder("model"), first, CONFIG)
        assert engine.target.sequences.oldest_cell(0) > 100  # the window cells the departing prompt would keep are gone
        again = run(engine.decoder("model"), sharing, CONFIG)
        assert again.tokens == fresh["sharing"].tokens and again.finished.stats.cache_n >= 700
        moved = run(engine.decoder("model"), departing, CONFIG)
        assert moved.tokens == fresh["departing"].tokens and moved.finished.stats.cache_n == 0


@pytest.mark.parametrize("arch", ["qwen35", "gemma3"])
def test_through_the_server_shared_prefixes_and_a_cancelled_answer_leave_each_answer_a_fresh_read(archs, arch, tmp_path):
    """A prompt that shares most of the cache, and one that departs from it more than a window back after an answer
    was cancelled midway: each answers as `generate` does, fresh."""
    words = "the theater of trees and the river " * 130
    sharing, departing = words[: len(words) * 9 // 10] + " a new end", words[:300] + " elsewhere entirely" * 20

    def fresh(prompt: str) -> str:
        result = cli("generate", "--raw", "--target", str(archs[arch]), "--no-draft", "--ctx-size", "2048", "--prompt", prompt,
                     "--max-tokens", "24", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["text"]

    expected = {prompt: fresh(prompt) for prompt in (sharing, departing)}
    with live_server(tmp_path, "--target", str(archs[arch]), "--draft", str(archs["llama"]), "--ctx-size", "2048",
                     "--parallel", "1") as server:
        def complete(prompt: str, **fields: object) -> dict:
            status, body = server.request("POST", "/completion", {"prompt": prompt, "n_predict": 24, "temperature": 0, **fields})
            assert status == 200, body
            return body

        complete(words)
        answer = complete(sharing)
        assert answer["content"] == expected[sharing] and answer["timings"]["cache_n"] > 0
        request = urllib.request.Request(server.url + "/completion", method="POST", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"prompt": words + " and so", "n_predict": 400, "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=60) as stream:
            assert stream.readline().startswith(b"data: ")
        assert complete(departing)["content"] == expected[departing]


def test_speculative_sampling_on_a_hybrid_target_keeps_its_distribution(archs):
    """At T > 0 the draft model's tokens are judged by speculative sampling and the rejected ones rolled back from the
    recurrent snapshots: the first tokens' joint distribution is the target's own (chi-square, as for attention)."""
    with Engine(EngineConfig(archs["qwen35"], archs["llama"], n_ctx=512)) as engine:
        prompt = raw_prompt_tokens(engine.target, "tell me something")
        expected = exact_joint(engine.target, prompt, SamplingParams(**SAMPLING))
        samples, drafted = sample_with_drafts(engine.decoder("model"), prompt, "speculative", draft_max=3)
        assert drafted > N_SEEDS
        assert fit_p_value(samples, expected) > SIGNIFICANCE


def test_check_names_a_recurrent_targets_memory_from_its_header_as_llama_cpp_does_on_load(archs):
    """The header-only word (gguf/memory_kind.py, a copy of llama.cpp's lists) agrees with the loaded model's."""
    for arch, path in archs.items():
        with Engine(EngineConfig(path, n_ctx=256)) as engine:
            assert memory_kind(arch) is engine.target.memory, arch
    result = cli("check", "--target", str(archs["mamba"]), "--draft", str(archs["llama"]))
    assert result.returncode == 0 and "cannot roll back rejected tokens" in result.stdout and "plain decoding" in result.stdout


def test_doctor_says_a_downloaded_recurrent_target_drafts_nothing_and_why(archs, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    catalog = tmp_path / "config" / "localspec" / "models.toml"
    catalog.parent.mkdir(parents=True)
    catalog.write_text(f'[[pair]]\nid = "mamba-tiny"\ntitle = "Mamba"\n[pair.target]\npath = "{archs["mamba"]}"\n'
                       f'[pair.draft]\npath = "{archs["llama"]}"\n')
    result = cli("doctor", env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("mamba-tiny"))
    assert "the target is recurrent: its recurrent state cannot roll back rejected tokens" in row


@run_async
async def test_the_app_says_why_a_recurrent_target_answers_plainly(archs, tmp_path):
    setup = Setup(tmp_path, HubConfig("http://127.0.0.1:9", tmp_path / "hf", offline=False, token=False))
    setup.write(local_pair("mamba", archs["mamba"], archs["llama"]), last_pair="mamba", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert any("Drafting: mamba" in n.message and "plain decoding" in n.message for n in app._notifications)


# What llama.cpp says of a model's MTP layers when it loads them: in a child process, where a malformed block aborts.
_MTP_PROBE = """
import sys, llama_cpp
params = llama_cpp.llama_model_default_params()
params.load_mtp = True
model = llama_cpp.llama_load_model_from_file(sys.argv[1].encode(), params)
print(llama_cpp.llama_model_n_layer_nextn(model) if model else "unloaded")
"""


def test_check_and_doctor_name_a_targets_mtp_layers_as_llama_cpp_loads_them(archs, tmp_path):
    mtp = mtp_models.with_mtp_blocks(archs["qwen35"], tmp_path / "qwen35-mtp.gguf")
    loaded = subprocess.run([sys.executable, "-c", _MTP_PROBE, str(mtp)], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.split()[-1] == "1", loaded.stderr[-2000:]
    result = cli("check", "--target", str(mtp), "--draft", str(archs["qwen35"]))
    assert result.returncode == 0, result.stderr
    assert "note: the target: it carries 1 MTP layer (draft heads of its own)" in result.stdout
    assert "MTP" not in cli("check", "--target", str(archs["qwen35"]), "--draft", str(archs["qwen35"])).stdout
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    catalog = tmp_path / "config" / "localspec" / "models.toml"
    catalog.parent.mkdir(parents=True)
    catalog.write_text(f'[[pair]]\nid = "mtp-tiny"\ntitle = "MTP"\n[pair.target]\npath = "{mtp}"\n[pair.draft]\npath = "{archs["qwen35"]}"\n')
    doctor = cli("doctor", env=env, timeout=120)
    assert doctor.returncode == 0, doctor.stderr
    row = next(line for line in doctor.stdout.splitlines() if line.strip().startswith("mtp-tiny"))
    assert "the target: it carries 1 MTP layer" in row
