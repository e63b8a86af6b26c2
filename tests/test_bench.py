"""`localspec bench` runs end to end on tiny models; its report is checked for content, never for speed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from localspec.bench.ceiling import lookup_ceiling
from localspec.bench.lockstep import record, record_in_lockstep
from localspec.bench.report import middle_ratio
from localspec.bench.runner import load_prompts, parse_ks, parse_p_mins, select_prompts
from localspec.engine.cost_model import StepCosts, draft_length_distribution, expected_tokens_per_step
from localspec.engine.decode import Decoder
from localspec.engine.defaults import AUTO_DRAFT_MAX
from localspec.engine.errors import EngineError
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.errors import UsageError
from tests.conftest import cli, hears_ctrl_c
from tests.lossless import NEAR_TIE_TINY


def bench(tmp_path, tiny, *args: str, charts: bool = True) -> subprocess.CompletedProcess[str]:
    """`localspec bench` on the tiny pair, run from `tmp_path`; charts go to tmp_path/charts when asked for."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # the self drafter's cut draft goes there
    return subprocess.run(
        [sys.executable, "-m", "localspec", "bench", "--target", str(tiny["target"]), "--draft", str(tiny["same"]),
         "--max-tokens", "24", *(["--charts", str(tmp_path / "charts")] if charts else []), *args],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )


def test_bench_reports_every_mode_and_writes_json_and_charts(tmp_path, tiny):
    out = tmp_path / "bench.json"
    tools = tmp_path / "broken-tools"
    tools.mkdir()
    for name in ("llama-bench", "llama-speculative-simple"):  # tools that are there but fail
        (tools / name).write_text("#!/bin/sh\necho 'no GGUF for you' >&2\nexit 1\n")
        (tools / name).chmod(0o755)
    result = bench(tmp_path, tiny, "--draft-max", "2,4", "--margins", "--json", str(out), "--llama-cpp-bin", str(tools))
    assert result.returncode == 0, result.stderr
    for section in ("Per prompt", "Overall", "By category", "auto's decisions", "auto's slowest prompt"):
        assert section in result.stdout
    # llama.cpp's tools failed: our measurements stand, and the report says why the comparison is missing.
    assert "llama.cpp comparison skipped: llama-bench failed: no GGUF for you" in result.stdout
    data = json.loads(out.read_text())
    device = data["machine"]["device"]  # the device it ran on, and the layers llama.cpp put on the GPU
    assert device["backend"] and device["physical_cores"] >= 1 and [o["role"] for o in device["offloaded"]] == ["target", "draft"]
    prompts = load_prompts(None)
    labels = [mode["label"] for mode in data["modes"]]
    expected = ["plain"] + [f"{d} K={k}" for d in ("model", "ngram", "hybrid", "hierarchical", "tree", "self") for k in (2, 4)] + [f"auto K≤{AUTO_DRAFT_MAX}"]
    assert labels == expected
    # The tiny target's template renders no tools: the prompts that offer them are left out, and the report says so. Tree
    # cannot draft under a grammar: it skips the structured prompts left, which every other mode runs.
    ran = [p for p in prompts if not p.tools]
    assert [p["id"] for p in data["prompts"]] == [p.id for p in ran]
    held = [p.id for p in ran if p.grammar is not None]
    assert held and data["notes"] == [f"the chat template of {tiny['target'].name} does not render tools, so "
                                      f"{', '.join(p.id for p in prompts if p.tools)} are left out",
                                      f"tree cannot draft under a grammar, so it skips {', '.join(held)}",
                                      f"llama.cpp's tools would run without the grammar, so they skip {', '.join(held)}"]
    assert all(f"Left out: {note}." in result.stdout for note in data["notes"])
    assert len(data["measurements"]) == len(ran) * len(labels) - len(held) * 2
    assert not any(m["prompt"] in held and m["drafter"] == "tree" for m in data["measurements"])
    total = len(data["measurements"])  # a line per measurement on stderr, with the time left; the self-draft's cut announced
    assert f"[1/{total}]" in result.stderr and f"[{total}/{total}]" in result.stderr and "left" in result.stderr
    assert "the self drafter cuts a draft from the target into" in result.stderr and "`localspec clean` removes it" in result.stderr
    # The bench's prompts are clear of near-ties on the tiny target (plain's margins say so), so lossless means
    # exactly equal here, on any machine.
    assert min(min(m["margins"]) for m in data["measurements"] if m["mode"] == "plain") >= NEAR_TIE_TINY
    for m in data["measurements"]:
        assert m["departs_at"] is None, m["mode"]  # every drafter is lossless here
        assert len(m["margins"]) == len(m["tokens"]) and min(m["margins"]) >= 0.0
        if m["drafter"] == "model" and m["stats"]["draft_n"] and m["prompt"] not in held:  # (under p-min the unsure tiny draft
            assert m["stats"]["acceptance_rate"] == 1.0  # may offer nothing) an identical draft, where no grammar masks the target
    assert {p["category"] for p in data["prompts"]} >= {"code-writing", "code-editing", "chat", "creative", "repetition-chat"}
    # Lookup with foresight, per prompt: never below plain, since it may always choose not to draft.
    assert set(data["lookup_ceiling"]) == {p.id for p in ran}
    # (an answer under a grammar ends where the grammar does: a whole JSON value, which parses)
    assert all(c["ratio"] > 1.0 - 1e-9 and (c["tokens"] == 24 or key in held) for key, c in data["lookup_ceiling"].items())
    for m in data["measurements"]:
        if m["prompt"] in held and len(m["tokens"]) < 24:
            assert isinstance(json.loads(m["text"]), dict), m["text"]
    assert "the target's verify cost by batch size" in result.stdout and data["verify_ms"]["1"] > 0
    passes = data["verify_passes"]  # what taught each size: a size auto never ran shows its calibration's few passes
    assert set(passes) == set(data["verify_ms"]) and min(passes.values()) >= 1
    one_token = round(passes["1"])
    assert re.search(rf"\b1: \d+ ms \(1\.00×, {one_token} pass{'' if one_token == 1 else 'es'}\)", result.stdout)
    assert "auto × plain per prompt: all rounds together, the median round and the range; the lookup ceiling, and the median's share of it" in result.stdout
    assert re.search(r"ceiling \d+\.\d\d, median ÷ ceiling \d+\.\d\d", result.stdout)
    for chart in ("bench-speed.png", "bench-acceptance.png"):
        path = tmp_path / "charts" / chart
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"chart: {path}" in result.stdout


def test_bench_at_a_temperature_compares_speculative_sampling_with_keyed_draws_and_sample_and_match(tmp_path, tiny):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "tell me everything"}\n{"id": "b", "prompt": "the cat sat on the mat"}\n')
    out = tmp_path / "bench.json"
    result = bench(tmp_path, tiny, "--draft-max", "3", "--drafters", "model", "--temperature", "0.7", "--prompts", str(prompts),
                   "--auto-max", "5", "--json", str(out), charts=False)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.rglob("*.png")) and "chart:" not in result.stdout  # charts only when --charts asks
    assert "Verification at the same temperature, prompts and seeds" in result.stdout
    assert "K=3: speculative sampling" in result.stdout and "keyed draws" in result.stdout and "sample-and-match" in result.stdout
    data = json.loads(out.read_text())
    assert [mode["label"] for mode in data["modes"]] == ["plain", "model K=3", "auto K≤5", "model K=3 keyed", "model K=3 sample-match"]
    assert all(m["departs_at"] is None for m in data["measurements"])  # not judged against plain at temperature > 0
    seeds = {m["prompt"]: set() for m in data["measurements"]}
    for m in data["measurements"]:
        seeds[m["prompt"]].add(m["stats"]["seed"])
    assert seeds == {"a": {0}, "b": {1}}  # every mode of a prompt sampled with the same seed


def test_drafters_none_benches_plain_against_auto_alone(tmp_path, tiny):
    out = tmp_path / "bench.json"
    result = bench(tmp_path, tiny, "--drafters", "none", "--only", "fresh-code,fresh-chat", "--json", str(out), charts=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [mode["label"] for mode in data["modes"]] == ["plain", f"auto K≤{AUTO_DRAFT_MAX}"]
    assert {p["category"] for p in data["prompts"]} == {"fresh-code", "fresh-chat"}
    assert sum(p["category"] == "fresh-code" for p in data["prompts"]) >= 6 and sum(p["category"] == "fresh-chat" for p in data["prompts"]) >= 6
    # No fixed drafter ran: the category table says so instead of a ratio of nothing.
    assert re.search(r"fresh-code\s+\d+\.\d\s+-\s+-\s+\d\.\d\d\s+-", result.stdout), result.stdout


def test_lockstep_benches_plain_and_auto_a_token_each_in_turn(tmp_path, tiny):
    out = tmp_path / "bench.json"
    result = bench(tmp_path, tiny, "--drafters", "none", "--lockstep", "--rounds", "2", "--only", "fresh-chat-sky,code-edit-rename",
                   "--json", str(out), charts=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["lockstep"] and "plain and auto in lockstep" in result.stdout
    assert "(in lockstep the median is each context's median round, their geometric mean)" in result.stdout
    runs = data["measurements"]
    assert len(runs) == 8 and all(m["departs_at"] is None and m["stats"]["predicted_n"] == len(m["tokens"]) > 0 for m in runs)
    # Fixed drafters would need a context each: refused before the pair loads, with what to do.
    refused = bench(tmp_path, tiny, "--drafters", "ngram", "--lockstep")
    assert refused.returncode == 2 and "add --drafters none" in refused.stderr and "Traceback" not in refused.stderr


def test_lockstep_rounds_weigh_each_context_alike():
    """A context 1.2% faster than the other, auto on it in rounds 1 and 3: the plain median takes that side, the
    lockstep median cancels it."""
    true, faster = 0.99, 1.012
    rounds = [true * faster, true / faster, true * faster]
    assert middle_ratio(rounds, lockstep=True) == pytest.approx(true)
    assert middle_ratio(rounds, lockstep=False) == pytest.approx(true * faster)
    assert middle_ratio([0.97], lockstep=True) == 0.97


class _Logged(Decoder):
    """A decoder that notes, in a log shared with others, its label at every event it yields."""

    def __init__(self, model: Model, label: str, log: list[str]) -> None:
        super().__init__(model)
        self.label, self.log = label, log

    def generate(self, prompt, config, cancel=None):  # type: ignore[no-untyped-def]
        for event in super().generate(prompt, config, cancel):
            self.log.append(self.label)
            yield event


def test_two_answers_in_lockstep_take_a_token_each_in_turn(tiny):
    """Two answers in lockstep, on two contexts of one model's weights, alternate event by event and give the tokens
    each gives alone; the second context's close leaves the weights to their owner."""
    prompt, config = [1, 5, 9, 14], GenerationConfig(max_tokens=24)
    with Model(tiny["target"]) as one:
        second = Model.beside(one)
        alone = [record((Decoder(model), prompt, config))[0] for model in (one, second)]
        log: list[str] = []
        both = record_in_lockstep([(_Logged(one, "a", log), prompt, config), (_Logged(second, "b", log), prompt, config)])
        second.close()
        assert record((Decoder(one), prompt, config))[0] == alone[0]
    assert [tokens for tokens, _, _ in both] == alone and alone[0] == alone[1] and len(alone[0]) == 24
    assert log[:48] == ["a", "b"] * 24  # 24 tokens each, a turn apiece, before either finishes


def test_bench_refuses_unknown_drafters(tmp_path, tiny):
    result = bench(tmp_path, tiny, "--drafters", "model,magic")
    assert result.returncode == 2 and "--drafters takes a comma-separated list" in result.stderr


def test_only_picks_prompts_by_id_or_category():
    prompts = load_prompts(None)
    chosen = select_prompts(prompts, "code-editing,creative-haiku")
    assert {p.category for p in chosen} == {"code-editing", "creative"} and sum(p.category == "creative" for p in chosen) == 1
    with pytest.raises(UsageError, match=r"--only: no prompt or category named nonsense\. Categories: chat, code-editing"):
        select_prompts(prompts, "chat,nonsense")


def test_the_lookup_ceiling_gains_only_where_the_answer_repeats():
    def batch_friendly(n: int) -> float:  # each extra row costs a fifth of a lone token
        return 10.0 + 2.0 * n

    prompt = list(range(100, 160))
    assert lookup_ceiling(prompt, list(range(500, 540)), batch_friendly, 4).ratio == 1.0  # nothing to copy
    assert lookup_ceiling(prompt, [], batch_friendly, 4).ratio == 1.0  # an empty answer (an end of text at once) gains nothing
    copy = lookup_ceiling(prompt, prompt[10:50], batch_friendly, 4)
    assert lookup_ceiling(prompt, prompt[10:13], batch_friendly, 4).ratio >= 1.0  # a run may not reach past the answer's end
    # After the first two tokens (nothing to match yet), steps of 1 + 4 tokens at 20 ms against 12 ms per token alone.
    assert copy.tokens == 40 and copy.plain_ms == 40 * 12.0
    assert copy.foresight_ms == pytest.approx(2 * 12.0 + 38 / 5 * 20.0, abs=20.0)
    assert copy.ratio > 2.0


def test_prompt_file_errors_name_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "prompt": "x"}\n{"id": "b"}\n')
    with pytest.raises(EngineError, match=r"p.jsonl, line 2: expected a JSON object with \"id\" and \"prompt\""):
        load_prompts(path)


def test_k_list_parsing():
    assert parse_ks("4,1,2,4") == [1, 2, 4]
    with pytest.raises(UsageError, match="comma-separated integers"):
        parse_ks("1,two")


def test_reference_p_min_parsing():
    assert parse_p_mins("0.6,0,0.6") == [0.0, 0.6]
    with pytest.raises(UsageError, match="between 0 and 1"):
        parse_p_mins("1.5")
    with pytest.raises(UsageError, match="comma-separated probabilities"):
        parse_p_mins("low")


def test_cost_model():
    # always drafting 3, acceptance cumulative per position (llama.cpp's n_acc_tokens_per_pos)
    assert expected_tokens_per_step([1.0, 1.0, 1.0], [0.9, 0.8, 0.6]) == pytest.approx(1 + 0.9 + 0.8 + 0.6)
    # a cut-off stops half the drafts after one token: position 1 only counts where it was reached
    assert expected_tokens_per_step([1.0, 0.5], [0.8, 0.6]) == pytest.approx(1 + 0.8 + 0.3)
    assert draft_length_distribution([1.0, 0.5]) == [0.0, 0.5, 0.5]
    assert draft_length_distribution([]) == [1.0]
    costs = StepCosts(plain_token_ms=10.0, draft_token_ms=2.0, verify_ms={2: 12.0, 3: 14.0})
    assert costs.predicted_speedup([1.0, 1.0], [1.0, 1.0]) == pytest.approx(3 * 10 / (2 * 2 + 14))
    assert costs.predicted_speedup([1.0, 0.5], [1.0, 1.0]) == pytest.approx(2.5 * 10 / (1.5 * 2 + 0.5 * 12 + 0.5 * 14))
    assert costs.predicted_speedup([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) is None  # batch of 4 never measured


def test_llama_speculative_simple_output_is_parsed():
    from localspec.bench.reference import ReferenceRun, parse_speculative_simple

    output = (
        "0.18.246.821 I decoded  129 tokens in   12.634 seconds, speed:   10.210 t/s\n"
        "0.18.246.897 I n_drafted = 99\n0.18.246.940 I n_accept  = 96\n0.18.246.960 I accept    = 96.970%\n"
    )
    assert parse_speculative_simple(output) == ReferenceRun(10.21, 129, 99, 96)
    assert parse_speculative_simple("E failed to initialize speculative decoding") is None
    assert parse_speculative_simple(output.split("0.18.246.897")[0]) is None  # its last lines lost at exit: run it again


def test_a_prompt_file_that_cannot_be_read_is_a_usage_error_before_loading(tmp_path, tiny):
    """bench --prompts /nonexistent.jsonl once ended in a FileNotFoundError traceback."""
    result = bench(tmp_path, tiny, "--prompts", str(tmp_path / "nonexistent.jsonl"), charts=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--prompts" in result.stderr and "nonexistent.jsonl: the file cannot be read (No such file or directory)" in result.stderr
    assert "loading the pair" not in result.stderr  # refused before any model loads


def test_the_autocomplete_replay_times_every_line_in_each_mode_and_completes_as_plain_does(tmp_path, tiny):
    out = tmp_path / "autocomplete.json"
    source = tmp_path / "shapes.py"
    source.write_text("def area(width, height):\n    return width * height\n\n\nclass Square:\n    def __init__(self, side):\n"
                      "        self.side = side\n")
    result = cli("bench", "autocomplete", str(source), "--target", str(tiny["fim"]), "--rounds", "2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "Autocomplete replay: 10 requests on 5 lines of" in result.stdout and "Traceback" not in result.stderr
    # Progress counts requests (every mode's, every round's), not modes: a long replay is not silent for minutes.
    assert "[10/60] round 1 · plain · 10/10 requests" in result.stderr and "[60/60] round 2" in result.stderr
    summaries = json.loads(out.read_text())
    assert [s["mode"] for s in summaries] == ["plain", "auto", "auto, no memory"]
    typing = [(1, ""), (1, "def"), (2, ""), (2, "return"), (5, ""), (5, "class"), (6, ""), (6, "def"), (7, ""), (7, "self.side")]
    for summary in summaries:
        # Each line with text at its start, then after its first word, in each round.
        assert [(c["line"], c["typed"]) for c in summary["completions"]] == typing * 2
        assert summary["requests"] == 20 and all(c["total_ms"] >= c["first_token_ms"] > 0 for c in summary["completions"])
        assert all("\n" not in c["text"] and c["tokens"] <= 48 for c in summary["completions"])  # the rest of one line at most
    assert summaries[0]["speedup_median"] == 1.0 and all(s["speedup_median"] > 0 for s in summaries)  # paired with plain's
    # Greedy: every mode completes each line as plain decoding does (a near-tie could part one on another machine).
    assert all(s["same_as_plain"] >= s["requests"] - 1 for s in summaries)
    # The default input is two of localspec's own files; a model without FIM tokens is refused before anything runs.
    refused = cli("bench", "autocomplete", "--target", str(tiny["target"]), "--lines", "1")
    assert refused.returncode == 1 and "no fill-in-the-middle tokens" in refused.stderr and "Traceback" not in refused.stderr


def test_each_bench_measurement_is_a_session_of_its_own(tmp_path, tiny):
    """A round repeats every prompt; lookup's memory of the first round must not draft the second."""
    out = tmp_path / "rounds.json"
    result = bench(tmp_path, tiny, "--only", "code-edit-rename", "--drafters", "ngram", "--draft-max", "4", "--rounds", "2",
                   "--json", str(out), charts=False)
    assert result.returncode == 0, result.stderr
    runs: dict[str, list[dict]] = {}
    for m in json.loads(out.read_text())["measurements"]:
        runs.setdefault(m["mode"], []).append(m)
    # ngram drafts only what its lookup finds, so equal drafts mean the same lookups: nothing remembered. auto's drafts
    # also follow its timed costs and what the first round taught it, so they may differ; its forgetting is checked in
    # test_lookup_across_requests_is_lossless_and_drafts_the_answer_a_request_gave_before.
    first, second = runs["ngram K=4"]
    assert first["tokens"] == second["tokens"] and first["stats"]["draft_n"] == second["stats"]["draft_n"]
    first, second = runs[f"auto K≤{AUTO_DRAFT_MAX}"]
    assert first["tokens"] == second["tokens"]


def test_outputs_and_llama_cpp_tools_are_checked_before_the_pair_loads(tmp_path, tiny):
    """Issue 47: a folder given to --json lost 259 s of results at the end; --llama-cpp-bin /nonexistent was found out
    after the load."""
    (tmp_path / "a-file").write_text("")
    cases = {
        ("--json", str(tmp_path)): f"--json {tmp_path} is a folder: give a file name",
        ("--json", str(tmp_path / "no" / "such" / "bench.json")): "does not exist. Create it first",
        ("--charts", str(tmp_path / "a-file")): "is a file: --charts takes a folder",
        ("--llama-cpp-bin", str(tmp_path / "nonexistent")): "not found: --llama-cpp-bin must be a llama.cpp build's bin directory",
    }
    for args, says in cases.items():
        result = bench(tmp_path, tiny, *args, charts=False)
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
        assert "loading the pair" not in result.stderr


def test_ctrl_c_keeps_the_prompts_that_finished(tmp_path, tiny):
    """Issue 47: Ctrl-C during a bench printed nothing and dropped every finished measurement."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    process = subprocess.Popen(
        [sys.executable, "-m", "localspec", "bench", "--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--max-tokens", "24",
         "--drafters", "model", "--draft-max", "2", "--rounds", "1000", "--json", str(out)],  # far longer than the wait for the signal
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, preexec_fn=hears_ctrl_c)
    assert process.stderr is not None
    n_modes = 3  # plain, model K=2, auto
    seen = ""
    try:
        while f"[{2 * n_modes + 1}/" not in seen:  # two prompts finished, the third under way
            line = process.stderr.readline()
            assert line, f"bench ended early: {seen}"
            seen += line
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        process.kill()  # a bench of a thousand rounds must not outlive a failed test
    assert process.returncode == 130, seen + stderr
    assert "Traceback" not in stderr and "interrupted (Ctrl-C)" in stderr and "Overall" in stdout
    data = json.loads(out.read_text())
    assert len(data["modes"]) == n_modes and data["interrupted"]
    assert len(data["prompts"]) >= 2
    for prompt in data["prompts"]:  # each prompt kept has every mode measured, the report's basis
        assert {m["mode"] for m in data["measurements"] if m["prompt"] == prompt["id"]} == {m["label"] for m in data["modes"]}


def _measured(prompt_id: str, mode, tokens_per_second: float, n_steps: int, drafted: int, accepted: int):  # type: ignore[no-untyped-def]
    from localspec.bench.results import Measurement
    from localspec.engine.stats import GenerationStats

    stats = GenerationStats(drafter=mode.drafter, draft_max=mode.k, predicted_n=128, predicted_ms=128_000 / tokens_per_second,
                            n_steps=n_steps, draft_n=drafted, draft_n_accepted=accepted)
    return Measurement(prompt_id, mode, [], stats)


def test_a_figure_its_own_measurements_contradict_is_flagged(capsys):
    """Issue 56: on a busy machine the bench printed ngram K=2 at 0.0% accepted and 1.00 tokens per pass, yet 4.26× plain,
    and a verify-cost table where 1 token cost 4972 ms and 3 tokens 1363 ms; the lookup ceiling priced with that table read
    1.00. Such figures are marked, said at the end, and the ceiling is withheld."""
    from localspec.bench.ceiling import Ceiling
    from localspec.bench.consistency import falling_costs, speedup_impossible
    from localspec.bench.report import print_report
    from localspec.bench.results import PLAIN, BenchPrompt, BenchResult, Mode

    assert speedup_impossible(4.26, 1.00) and not speedup_impossible(1.05, 1.00) and not speedup_impossible(2.4, 2.6)
    assert falling_costs({1: 4972.0, 2: 5100.0, 3: 1363.0}) == [(1, 3), (2, 3)] and not falling_costs({1: 70.0, 2: 140.0, 4: 175.0})
    # A quiet 2-core Xeon's real table: its kernels verify 16 tokens faster than 15, and 4 faster than 3.
    assert not falling_costs({1: 69.0, 3: 127.0, 4: 108.0, 15: 314.0, 16: 248.0})

    ngram, auto = Mode("ngram", 2), Mode("auto", 32)
    prompts = [BenchPrompt("busy", "code-editing", "x")]

    def report(ngram_rate: float, verify_ms: dict[int, float]) -> str:
        result = BenchResult(ks=[2], prompts=prompts, modes=[PLAIN, ngram, auto], verify_ms=verify_ms,
                             ceilings={"busy": Ceiling(128, 128 * 70.0, 64 * 90.0)})
        result.measurements = [_measured("busy", PLAIN, 5.0, 128, 0, 0), _measured("busy", ngram, ngram_rate, 128, 256, 0),
                               _measured("busy", auto, 9.0, 60, 120, 68)]
        print_report(result)
        return capsys.readouterr().out

    busy = report(21.3, {1: 4972.0, 3: 1363.0})
    assert "4.26!" in busy and "busy, ngram K=2: 4.26× plain with 1.00 tokens per pass" in busy
    assert "1.80 " in busy and "1.80!" not in busy  # auto: 2.13 tokens per pass allow its 1.80×
    assert "3 tokens in one pass took 1363 ms, 1 took 4972 ms" in busy and "contradicts itself" in busy
    assert "ceiling 1.56" not in busy  # priced with the contradicted table: withheld
    quiet = report(4.9, {1: 70.0, 3: 150.0})
    assert "!" not in quiet and "ceiling 1.56" in quiet
    assert "1: 70 ms (1.00×), 3: 150 ms (2.14×)" in quiet  # a result saved without the counts of passes
