"""`localspec generate --json-schema / --grammar` (issue 76): the answer held to a schema or a GBNF grammar from the command
line, the grammar's share in the summary and in --json, its "× plain" against the constrained target, and bad input
refused with exit status 2, naming what is wrong."""

from __future__ import annotations

import json
import re

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.grammar import json_grammar
from tests.conftest import cli, run
from tests.lossless import assert_clear_of_ties
from tests.schemas import TAGGED

PROMPT = "tell me a name"  # under TAGGED, clear of near-ties (its smallest top-2 gap 0.24)
# A sentence whose frame is forced: only the word in the middle is the target's to choose.
VERDICT = 'root ::= "The answer is " ("yes" | "no" | "maybe") ", and that is final."\n'


def test_an_answer_held_to_a_schema_is_the_constrained_targets_with_the_grammars_figures(tmp_path, tiny):
    schema = tmp_path / "tagged.json"
    schema.write_text(json.dumps(TAGGED), encoding="utf-8")
    args = ["generate", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--prompt", PROMPT, "--max-tokens", "120"]
    by_file = cli(*args, "--json-schema", str(schema), "--json")
    assert by_file.returncode == 0, by_file.stderr
    payload = json.loads(by_file.stdout)
    with Engine(EngineConfig(tiny["target"])) as engine:
        plain = run(engine.plain, chat_prompt_tokens(engine.target, [Message("user", PROMPT)]),
                    GenerationConfig(max_tokens=120, grammar=engine.target.grammar(json_grammar(TAGGED))))
    assert_clear_of_ties(plain)  # so the speculative answer must equal the constrained target's plain one exactly
    assert payload["tokens"] == plain.tokens and set(json.loads(payload["text"])) == {"name", "tags"}
    stats = payload["stats"]
    assert stats["drafter"] == "auto" and 0 < stats["forced_n_accepted"] <= stats["forced_n"] <= stats["draft_n"]
    assert stats["decisions_by_source"]["grammar"]["tokens"] == stats["forced_n_accepted"]
    assert stats["acceptance_by_source"]["grammar"] == stats["forced_n_accepted"] / stats["forced_n"]
    assert stats["grammar_rows"] > stats["n_steps"] and stats["grammar_ms_per_row"] == pytest.approx(stats["t_grammar_ms"] / stats["grammar_rows"])
    # its "× plain" divides by the constrained target's plain rate: the baseline plus the grammar's time per row
    assert payload["plain_ms_per_token"], "auto has measured the target's plain pass by now (its cost cache), and took plain steps"
    assert payload["plain_per_second"] == pytest.approx(1000 / (payload["plain_ms_per_token"] + stats["grammar_ms_per_row"]))
    assert payload["speedup"] == pytest.approx(stats["predicted_per_second"] / payload["plain_per_second"])
    inline = cli(*args, "--json-schema", json.dumps(TAGGED), "--json")
    assert inline.returncode == 0 and json.loads(inline.stdout)["tokens"] == plain.tokens, inline.stderr


def test_a_gbnf_grammar_and_the_summary_that_names_the_grammars_share(tmp_path, tiny):
    grammar = tmp_path / "verdict.gbnf"
    grammar.write_text(VERDICT, encoding="utf-8")
    args = ["generate", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--prompt", PROMPT, "--grammar", str(grammar)]
    for drafter in ("auto", "model"):  # auto first: it times the pair's passes, the baseline "plain under it" adds to
        result = cli(*args, "--drafter", drafter)
        assert result.returncode == 0, result.stderr
        assert re.fullmatch(r"The answer is (yes|no|maybe), and that is final\.\n", result.stdout), result.stdout
        line = next(line for line in result.stderr.splitlines() if line.startswith("[grammar"))
        assert re.fullmatch(r"\[grammar \d+ tokens in \d+ steps: \d+ of \d+ forced kept · masks \d+\.\d\d ms a row \(\d+ rows\) · "
                            r"plain under it \d+\.\d tok/s\]", line), line
        if drafter == "model":  # the JSON of a run of its own: the same drafts (auto's follow the clock), so the same forcing
            stats = json.loads(cli(*args, "--drafter", drafter, "--json").stdout)["stats"]
            share = stats["decisions_by_source"]["grammar"]
            assert line.startswith(f"[grammar {share['tokens']} tokens in {share['steps']} steps: {stats['forced_n_accepted']} of "
                                   f"{stats['forced_n']} forced kept · "), (line, stats)
        if drafter == "auto":  # auto's line holds its own choices (which follow the clock); the tokens add up over both lines
            total = int(re.search(r" · (\d+) tokens · ", result.stderr).group(1))
            if chose := re.search(r"\[auto chose: (.*)\]", result.stderr):
                assert "grammar" not in chose.group(1), result.stderr
                made = sum(int(n) for n in re.findall(r"(\d+) (?:tokens )?(?:in \d+|from the prompt's pass)", chose.group(1)))
            else:
                made = int(re.search(r"\[auto: plain decoding for all (\d+) tokens besides the grammar's: ", result.stderr).group(1))
            assert made + int(re.match(r"\[grammar (\d+)", line).group(1)) == total, result.stderr
    plain = cli(*args, "--no-draft")  # plain decoding drafts none of the forced text, and still pays the masks
    assert "[grammar: no forced text drafted · masks " in plain.stderr and "× plain" not in plain.stderr, plain.stderr


def test_a_grammar_or_schema_given_wrong_exits_2_before_anything_loads(tmp_path, tiny):
    missing = str(tmp_path / "never-loaded.gguf")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    (tmp_path / "cut.json").write_text('{"type": ', encoding="utf-8")
    (tmp_path / "empty.gbnf").write_text("", encoding="utf-8")
    cases = {
        ("--json-schema", "no-such-schema.json"): "--json-schema no-such-schema.json: there is no such file, and it is not a schema given inline",
        ("--json-schema", str(tmp_path / "list.json")): "a JSON schema is an object ({\"type\": ...}), not an array",
        ("--json-schema", str(tmp_path / "cut.json")): "cut.json: this is not JSON (Expecting value at line 1, column 10)",
        ("--json-schema", "{name: 1}"): "--json-schema (inline): this is not JSON (Expecting property name",
        ("--json-schema", '{"type": "string", "pattern": "[a-"}'): "--json-schema (inline): the grammar cannot be used: regex parse error",
        ("--grammar", str(tmp_path / "none.gbnf")): "none.gbnf: the file cannot be read (No such file or directory)",
        ("--grammar", str(tmp_path / "empty.gbnf")): "empty.gbnf: the file is empty",
    }
    for (option, value), says in cases.items():
        result = cli("generate", "--target", missing, "--prompt", "hi", option, value)
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), (value, result.stderr)
        assert says in result.stderr and "never-loaded" not in result.stderr, (value, result.stderr)
    both = cli("generate", "--target", missing, "--prompt", "hi", "--json-schema", "{}", "--grammar", str(tmp_path / "empty.gbnf"))
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    tree = cli("generate", "--target", missing, "--draft", missing, "--prompt", "hi", "--drafter", "tree", "--json-schema", "{}")
    assert tree.returncode == 2 and "The tree drafter cannot draft under a grammar (--json-schema, --grammar)" in tree.stderr, tree.stderr


def test_a_gbnf_grammar_no_engine_can_read_exits_2_naming_it(tmp_path, tiny):
    """llguidance refuses it before the load, and llama.cpp's own parser, tried in its place, after: the user's fault."""
    grammar = tmp_path / "open.gbnf"
    grammar.write_text('root ::= ("a" | "b"', encoding="utf-8")
    result = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--grammar", str(grammar))
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert f"--grammar {grammar}: The grammar could not be parsed by llama.cpp" in result.stderr and "llguidance refused it too" in result.stderr
