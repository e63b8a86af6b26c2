"""The command line: version, module entry point, generate's streaming and JSON output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from localspec import __version__
from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.defaults import AUTO_DRAFT_MAX
from localspec.engine.drafters.auto.choice import Source
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import cli, hears_ctrl_c, run
from tests.lossless import assert_clear_of_ties


def test_version_from_the_module_and_the_script():
    assert cli("--version").stdout.strip() == f"localspec {__version__}"
    installed_script = Path(sys.executable).parent / "localspec"
    script = subprocess.run([str(installed_script), "--version"], capture_output=True, text=True, timeout=60)
    assert script.stdout.strip() == f"localspec {__version__}"


def test_generate_json_matches_the_engine(tiny):
    args = ["generate", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--prompt", "hello there"]
    result = cli(*args, "--max-tokens", "30", "--draft-max", "3", "--drafter", "model", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    with Engine(EngineConfig(tiny["target"])) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "hello there")])
        plain = run(engine.plain, prompt, GenerationConfig(max_tokens=30))
    assert_clear_of_ties(plain)  # so the command line's speculative text must equal it exactly, on any machine
    assert payload["tokens"] == plain.tokens
    assert payload["text"] == plain.text
    assert payload["stop_reason"] == "max_tokens"
    stats = payload["stats"]
    for key in ("n_steps", "draft_n", "draft_n_accepted", "acceptance_rate", "tokens_per_step", "acceptance_by_position",
                "t_draft_ms", "t_verify_ms", "t_other_ms", "prompt_n", "prompt_ms", "predicted_per_second", "python_ms_per_step"):
        assert key in stats
    assert stats["draft_n"] > 0 and stats["drafter"] == "model"


def test_generate_uses_auto_by_default_and_reports_its_decisions(tiny):
    result = cli("generate", "--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--prompt", "hello there",
                 "--max-tokens", "30", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    assert stats["drafter"] == "auto" and stats["draft_max"] == AUTO_DRAFT_MAX
    assert sum(stats["decisions"].values()) == stats["n_steps"] and stats["predicted_tokens_per_step"] >= 1.0


def test_generate_streams_text_and_a_summary(tiny):
    result = cli("generate", "--target", str(tiny["target"]), "--no-draft", "--prompt", "hi", "--max-tokens", "10")
    assert result.returncode == 0, result.stderr
    assert "[no drafter (plain decoding) · 10 tokens" in result.stderr and "tok/s" in result.stderr


def summary_split(summary: str) -> tuple[int, dict[str, tuple[int, int]], int]:
    """From generate's summary under auto: the answer's tokens, auto's {source: (tokens, steps)}, and the tokens no step made."""
    total = int(re.search(r"\[auto, K up to \d+ · (\d+) tokens", summary).group(1))
    line = re.search(r"\[auto chose: (.*)\]", summary).group(1)
    split = {m["source"]: (int(m["tokens"]), int(m["steps"]))
             for m in re.finditer(r"(?P<source>[A-Za-z+ -]+?) (?P<tokens>\d+) (?:tokens )?in (?P<steps>\d+)(?: steps)?(?: · |$)", line)}
    first = re.search(r"(\d+) from the prompt's pass", line)
    return total, split, int(first.group(1)) if first else 0


def test_generate_names_the_drafter_and_splits_autos_steps_by_source(tiny):
    """Issue 75: auto's summary read "[64 tokens · 14.3 tok/s · prompt 38 tokens in 493 ms]", with no drafter and no word of
    what auto ran. It names the drafter, and gives auto's steps and the tokens they made by source, in text and JSON."""
    args = ["generate", "--target", str(tiny["talkative"]), "--draft", str(tiny["talkative"]), "--prompt", "tell me everything",
            "--max-tokens", "200"]
    result = cli(*args, "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    split = stats["decisions_by_source"]
    assert split and set(split) <= {source.value for source in Source}
    assert sum(share["steps"] for share in split.values()) == stats["n_steps"] == sum(stats["decisions"].values())
    assert sum(share["tokens"] for share in split.values()) == stats["predicted_n"] - 1 == 199  # the first: the prompt's pass
    assert split.get("none", {"steps": 0, "tokens": 0})["steps"] == split.get("none", {"tokens": 0})["tokens"]  # one a plain step
    drafting = {source: share for source, share in split.items() if source != "none"}
    assert sum(share["tokens"] - share["steps"] for share in drafting.values()) == stats["draft_n_accepted"] > 0
    summary = cli(*args).stderr  # the text summary: a run of its own (auto's choices follow the clock), read on its own terms
    total, text_split, first = summary_split(summary)
    assert total == 200 and first == 1 and text_split, summary
    assert set(text_split) <= {source.display_name for source in Source}
    assert sum(tokens for tokens, _ in text_split.values()) + first == total


def test_generate_says_when_auto_drafted_nothing(tiny):
    """Without a draft, auto's only source is prompt lookup, and this answer has nothing for it to copy (--drafter ngram
    drafts nothing): auto decodes plainly throughout, and its summary says so."""
    args = ["generate", "--target", str(tiny["target"]), "--prompt", "hi", "--max-tokens", "30"]
    assert json.loads(cli(*args, "--drafter", "ngram", "--json").stdout)["stats"]["draft_n"] == 0
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert "[auto, K up to 32 · 30 tokens · " in result.stderr and "accepted" not in result.stderr
    assert "[auto: plain decoding for all 30 tokens" in result.stderr
    stats = json.loads(cli(*args, "--json").stdout)["stats"]
    assert stats["decisions_by_source"] == {"none": {"steps": 29, "tokens": 29}} and stats["draft_n"] == 0


def test_bad_sampling_value_is_a_clear_error(tiny):
    result = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--top-p", "1.5")
    assert result.returncode == 2
    assert "top-p must be above 0 and at most 1, not 1.5" in result.stderr and "Traceback" not in result.stderr


def test_min_p_1_is_taken_and_samples_the_greedy_text(tiny):
    """Issue 75: --min-p 1.0 was refused; as in llama.cpp it keeps only the most probable token, whatever the temperature."""
    greedy = cli("generate", "--target", str(tiny["target"]), "--no-draft", "--prompt", "hi", "--max-tokens", "12", "--json")
    sampled = cli("generate", "--target", str(tiny["target"]), "--no-draft", "--prompt", "hi", "--max-tokens", "12", "--json",
                  "--temperature", "2", "--top-k", "0", "--min-p", "1.0", "--seed", "5")
    assert greedy.returncode == sampled.returncode == 0, sampled.stderr
    assert json.loads(sampled.stdout)["text"] == json.loads(greedy.stdout)["text"]


def test_bad_bench_list_is_a_usage_error_with_status_2(tiny):
    result = cli("bench", "--target", str(tiny["target"]), "--draft-max", "1,two")
    assert result.returncode == 2 and "comma-separated integers" in result.stderr and "Traceback" not in result.stderr


def test_a_programming_error_is_not_passed_off_as_a_user_error(monkeypatch, capsys):
    """A ValueError from a bug must surface as a traceback, not as a one-line 'localspec: ...' with status 2."""
    import localspec.cli.doctor
    from localspec.cli.main import main

    def broken(_args) -> int:
        raise ValueError("a bug")

    monkeypatch.setattr(localspec.cli.doctor, "run_doctor", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["doctor"])


def test_llama_cpp_log_goes_to_the_log_directory_not_the_terminal(tmp_path, tiny):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = subprocess.run(
        [sys.executable, "-m", "localspec", "generate", "--target", str(tiny["target"]), "--prompt", "hi", "--max-tokens", "3"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stderr
    log = tmp_path / "state" / "localspec" / "log" / "llama.log"
    assert "llama_model_loader" in log.read_text()
    assert "llama_model_loader" not in result.stderr + result.stdout


def test_a_reader_that_goes_away_ends_generate_quietly(tiny):
    """`localspec generate ... | head -c 20` once ended in a BrokenPipeError traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "localspec", "generate", "--target", str(tiny["talkative"]), "--no-draft",
         "--prompt", "tell me everything", "--max-tokens", "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert len(process.stdout.read(20)) == 20
    process.stdout.close()  # as head does once it has its bytes
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and stderr == ""


def test_options_are_checked_before_anything_loads(tmp_path):
    """Each bad value names its option and exits 2 at once: the target named here does not even exist."""
    missing = str(tmp_path / "never-loaded.gguf")
    cases = {
        ("--max-tokens", "0"): "--max-tokens 0 is out of range", ("--top-k", "-1"): "--top-k: top-k must be 0 (off) or positive",
        ("--draft-p-min", "1.5"): "--draft-p-min 1.5 is out of range", ("--threads", "0"): "--threads 0 is out of range",
        ("--ctx-size", "0"): "--ctx-size 0 is out of range", ("--draft-max", "99"): "--draft-max 99 is out of range",
        ("--seed", "-1"): "--seed -1 is out of range", ("--temperature", "-2"): "--temperature: temperature must be 0",
        ("--prompt", "caf\udcff"): "--prompt is not valid UTF-8 text (byte 0xff at character 4)",
        ("--temperature", "nan"): "--temperature: temperature must be 0 (greedy) or a positive number, not nan",
        ("--temperature", "inf"): "--temperature: temperature must be 0 (greedy) or a positive number, not inf",
    }
    for (option, value), expected in cases.items():
        prompt = [] if option == "--prompt" else ["--prompt", "hi"]
        result = cli("generate", "--target", missing, *prompt, option, value)
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), (option, result.stderr)
        assert expected in result.stderr and "never-loaded" not in result.stderr, (option, result.stderr)
    empty = cli("generate", "--target", missing, "--prompt", "", "--raw")  # issue 47: a ValueError after the load
    assert empty.returncode == 2 and "--prompt is empty" in empty.stderr and "Traceback" not in empty.stderr, empty.stderr
    tree = cli("generate", "--target", missing, "--prompt", "hi", "--drafter", "tree")  # no draft given
    assert tree.returncode == 2 and "--drafter tree needs a draft model" in tree.stderr
    rounds = cli("bench", "--target", missing, "--rounds", "0")
    assert rounds.returncode == 2 and "--rounds 0 is out of range" in rounds.stderr


def test_doctor_shows_the_caches_and_clean_asks_then_removes_only_them(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = tmp_path / "cache" / "localspec"
    (cache / "self-drafts").mkdir(parents=True)
    (cache / "self-drafts" / "t.first7.gguf").write_bytes(b"x" * 5000)
    (cache / "costs").mkdir()
    (cache / "costs" / "t.json").write_text("{}")
    (cache / "test-models").mkdir()  # not localspec's to clean (here, the suite's download cache)
    (cache / "test-models" / "keep.gguf").write_text("kept")
    doctor = cli("doctor", env=env)
    assert doctor.returncode == 0 and "self-drafts 5.0 KB, measured costs 2 B" in doctor.stdout and "`localspec clean`" in doctor.stdout
    refused = cli("clean", env=env)  # no terminal to ask on
    assert refused.returncode == 2 and "Add --yes" in refused.stderr and (cache / "self-drafts" / "t.first7.gguf").exists()
    cleaned = cli("clean", "--yes", env=env)
    assert cleaned.returncode == 0 and "removed self-drafts (5.0 KB)" in cleaned.stdout
    assert not (cache / "self-drafts").exists() and not (cache / "costs").exists() and (cache / "test-models" / "keep.gguf").exists()
    assert "Nothing to clean" in cli("clean", env=env).stdout


def test_a_cut_gguf_a_zero_layer_draft_and_a_url_that_is_not_one_get_a_sentence_not_a_traceback(tmp_path, tiny):
    """Issue 47: make-draft on a truncated GGUF and bench-serve notaurl ended in tracebacks; --layers 0 came after the load."""
    data = tiny["target"].read_bytes()
    for name, cut in (("header-cut.gguf", 2000), ("weights-cut.gguf", len(data) // 2)):
        (tmp_path / name).write_bytes(data[:cut])
        result = cli("make-draft", "--layers", "1", str(tmp_path / name), str(tmp_path / f"{name}.draft.gguf"))
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert ("the file is truncated" in result.stderr or "is incomplete" in result.stderr) and "again" in result.stderr  # the header reader's words
        assert not list(tmp_path.glob(f"{name}.draft.gguf*"))
    zero = cli("make-draft", "--layers", "0", str(tmp_path / "never-read.gguf"), str(tmp_path / "out.gguf"))
    assert zero.returncode == 2 and "--layers 0 is out of range" in zero.stderr
    url = cli("bench-serve", "notaurl")
    assert url.returncode == 2 and "takes a running server's URL, such as http://127.0.0.1:8080" in url.stderr and "Traceback" not in url.stderr


def test_a_prompt_from_a_file_or_standard_input_and_the_exit_status_rule(tmp_path, tiny):
    """Issue 47: one argument is capped at 128 KiB and `--prompt -` was taken literally; the exit statuses had no rule."""
    text = "hello there " * 20
    (tmp_path / "prompt.txt").write_text(text)
    by_argument = cli("generate", "--target", str(tiny["target"]), "--raw", "--prompt", text, "--max-tokens", "6", "--no-draft", "--json")
    by_file = cli("generate", "--target", str(tiny["target"]), "--raw", "--prompt-file", str(tmp_path / "prompt.txt"), "--max-tokens", "6",
                  "--no-draft", "--json")
    by_stdin = subprocess.run([sys.executable, "-m", "localspec", "generate", "--target", str(tiny["target"]), "--raw", "--prompt", "-",
                               "--max-tokens", "6", "--no-draft", "--json"], input=text, capture_output=True, text=True, timeout=300)
    assert by_argument.returncode == by_file.returncode == by_stdin.returncode == 0, (by_file.stderr, by_stdin.stderr)
    assert json.loads(by_argument.stdout)["text"] == json.loads(by_file.stdout)["text"] == json.loads(by_stdin.stdout)["text"]
    missing = cli("generate", "--target", str(tiny["target"]), "--prompt-file", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "--prompt-file" in missing.stderr and "cannot be read (No such file or directory)" in missing.stderr
    empty = subprocess.run([sys.executable, "-m", "localspec", "generate", "--target", str(tiny["target"]), "--prompt", "-"], input="",
                           capture_output=True, text=True, timeout=300)
    assert empty.returncode == 2 and "standard input was empty" in empty.stderr
    assert "exit status: 0 done; 2 the command line is wrong" in " ".join(cli("--help").stdout.split())


def test_a_host_that_is_not_this_machines_is_not_told_to_pick_another_port(tiny):
    """Issue 47: every bind failure said "another server may be using it. Pick another --port"."""
    for host, says in (("notahost", "--host 'notahost' is not an address this machine can listen on"),
                       ("192.0.2.1", "--host must be an address of this machine")):  # TEST-NET-1: never this machine's
        result = cli("serve", "--host", host, "--api-key", "k", "--target", str(tiny["target"]), timeout=120)
        assert result.returncode == 2 and says in result.stderr and "--port" not in result.stderr, result.stderr


def test_what_a_newcomer_typed_wrong_exits_2_with_a_sentence(tmp_path, tiny):
    """Issue 56: a closed standard input ended in an AttributeError; `bench --only no-such-id`, `make-draft --layers 999` and an
    unknown pair id exited 1, against the rule "2: the command line is wrong"; /dev/null was called a directory."""
    closed = subprocess.run([sys.executable, "-m", "localspec", "generate", "--target", str(tiny["target"]), "--prompt", "-"],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                            preexec_fn=lambda: os.close(0))  # `<&-`: the process starts with no standard input at all
    assert closed.returncode == 2 and "standard input is closed" in closed.stderr and "Traceback" not in closed.stderr, closed.stderr
    only = cli("bench", "--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--only", "no-such-id")
    assert only.returncode == 2 and "--only: no prompt or category named no-such-id" in only.stderr
    layers = cli("make-draft", "--layers", "999", str(tiny["target"]), str(tmp_path / "out.gguf"))
    assert layers.returncode == 2 and "A self-draft of 999 blocks cannot be cut" in layers.stderr and not (tmp_path / "out.gguf").exists()
    device = cli("generate", "--target", "/dev/null", "--prompt", "hi")
    assert device.returncode == 1 and "/dev/null is not a regular file" in device.stderr and "directory" not in device.stderr


def test_vocabulary_types_are_named_as_check_names_them():
    """Issue 56: a Gemma draft for a Qwen target read "vocabulary types differ (target 2, draft 1)"."""
    from dataclasses import dataclass

    from localspec.engine.errors import PairMismatchError
    from localspec.engine.pair_check import VOCAB_TYPES, check_pair

    @dataclass
    class Facts:  # what a GGUF header or a loaded model says of its tokenizer
        vocab_type: int
        bos: int = 1
        eos: int = 2
        add_bos: bool = False
        add_eos: bool = False
        n_vocab: int = 10

        def token_text(self, token: int) -> str:
            return str(token)

    with pytest.raises(PairMismatchError, match=r"vocabulary types differ \(target gpt2, draft llama\)"):
        check_pair(Facts(VOCAB_TYPES["gpt2"]), Facts(VOCAB_TYPES["llama"]))


def test_ctrl_c_during_a_model_load_stops_it_and_exits_130(tmp_path, real_models):
    """Issue 56: Ctrl-C 3-4 s into a load was printed as "Exception ignored on calling ctypes callback function" (it landed
    in llama.cpp's log callback) and lost: the command loaded, answered and exited 0."""
    import signal
    import time

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "localspec", "generate", "--target", str(real_models[0]), "--no-draft",
                                "--prompt", "Write a long story.", "--max-tokens", "400"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=hears_ctrl_c)
    try:
        while not any(log.stat().st_size for log in (tmp_path / "state").rglob("llama.log")):  # llama.cpp has begun the load
            assert process.poll() is None, "the command ended before its load began"
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, (process.returncode, err)
    assert "Exception ignored" not in err and "Traceback" not in err and out == "", (out, err)


def test_models_named_wrong_and_a_drafter_these_models_cannot_run_exit_2(tiny):
    """Issue 75: "Name the models" and "Give --pair, or --target, not both" exited 1, as did a drafter the models given
    cannot run (the user's choice to change, as `--drafter tree` without a draft already exits 2)."""
    target = str(tiny["target"])
    cases = {
        ("generate", "--prompt", "hi"): "Name the models: --pair ID",
        ("serve",): "Name the models: --pair ID",
        ("bench", "--pair", "some-pair", "--target", target): "Give --pair, or --target (and --draft), not both.",
        ("generate", "--pair", "some-pair", "--draft", target, "--prompt", "hi"): "Give --pair, or --target (and --draft), not both.",
        ("generate", "--target", target, "--prompt", "hi", "--drafter", "mtp"): "carries no MTP layers",
        ("generate", "--target", target, "--prompt", "hi", "--drafter", "eagle3"): "needs an EAGLE-3 head",
        ("generate", "--target", target, "--draft", str(tiny["other_vocab"]), "--prompt", "hi", "--drafter", "model"):
            "run it with --drafter bridged",
    }
    for args, expected in cases.items():
        result = cli(*args)
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), (args, result.stderr)
        assert expected in result.stderr and result.stdout == "", (args, result.stderr, result.stdout)
