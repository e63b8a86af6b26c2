"""The bench's structured prompts (issue 76, item 4): a record carries an OpenAI-shaped response_format, or tools and a
tool_choice, and every mode answers under the grammar `serve` would hold the same request to."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.bench.runner import load_prompts
from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.llama.model import Model, ModelConfig
from localspec.errors import UsageError


def tool(name: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS = [tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city", "unit"]),
         tool("get_local_time", {"timezone": {"type": "string"}}, ["timezone"])]
BOOK = {"type": "object", "properties": {"title": {"type": "string"}, "author": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title", "author", "year"]}
CALLS = {"id": "calls", "category": "structured", "prompt": "What's the weather in Lisbon right now, in celsius, and what time is it there?",
         "tools": TOOLS, "tool_choice": "required"}
EXTRACT = {"id": "book", "category": "structured", "prompt": "Extract the book: Ursula K. Le Guin published The Dispossessed in 1974.",
           "response_format": {"type": "json_schema", "json_schema": {"name": "book", "strict": True, "schema": BOOK}}}


def write_prompts(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def is_call(value: object) -> bool:
    """One call to an offered tool, its arguments those the tool's schema requires, and no others."""
    if not isinstance(value, dict) or set(value) != {"name", "arguments"}:
        return False
    wanted = {t["function"]["name"]: t["function"]["parameters"]["required"] for t in TOOLS}
    return value["name"] in wanted and isinstance(value["arguments"], dict) and sorted(value["arguments"]) == sorted(wanted[value["name"]]) \
        and all(isinstance(v, str) for v in value["arguments"].values())


def test_structured_prompts_run_under_their_grammar_in_every_mode_on_the_real_pair(tmp_path, real_models):
    target, draft = real_models
    prompts = write_prompts(tmp_path / "structured.jsonl", CALLS, EXTRACT)
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "localspec", "bench", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts),
         "--drafters", "ngram,tree", "--draft-max", "4", "--max-tokens", "64", "--json", str(out)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    # tree cannot draft under a grammar: skipped, with a note; plain, ngram and auto answer both prompts.
    assert data["notes"] == ["tree cannot draft under a grammar, so it skips calls, book"] and "Left out: tree cannot" in result.stdout
    runs = data["measurements"]
    assert sorted((m["prompt"], m["mode"]) for m in runs) == sorted((p, mode) for p in ("calls", "book")
                                                                    for mode in ("plain", "ngram K=4", "auto K≤32"))
    for m in runs:  # each answer is whole (it ended where its grammar did) and holds to its schema
        assert len(m["tokens"]) < 64, m["text"]
        answer = json.loads(m["text"])
        if m["prompt"] == "calls":  # parallel calls allowed: a list of one call or more
            assert isinstance(answer, list) and answer and all(is_call(call) for call in answer), (m["mode"], m["text"])
        else:
            assert set(answer) == {"title", "author", "year"} and isinstance(answer["year"], int), (m["mode"], m["text"])
        assert m["stats"]["grammar_rows"] >= m["stats"]["n_steps"] and m["grammar_ms_per_pass"] > 0
    # The text the schema fixes (the call's `[{"name": "`, the keys) was drafted for free, and the target kept it.
    auto = data["grammar"]["structured"]["auto"]
    assert auto["forced_n"] > 0 and auto["forced_n_accepted"] > 0 and data["grammar"]["structured"]["prompts"] == ["calls", "book"]
    assert data["grammar"]["structured"]["plain"]["ms_per_pass"] > 0 and data["grammar"]["structured"]["auto_ratio"] > 0
    # The tool prompt is the chat with the tools as the server renders them (the template's tool block), not the bare question.
    with Model(target, ModelConfig(n_ctx=512, n_threads=1)) as model:
        messages = [Message("user", CALLS["prompt"])]
        with_tools, bare = len(chat_prompt_tokens(model, messages, TOOLS)), len(chat_prompt_tokens(model, messages))
    assert with_tools > bare + 50 and {m["stats"]["prompt_n"] for m in runs if m["prompt"] == "calls"} == {with_tools}
    # The report: the grammar's time per pass in the tables, and under the category table for plain and auto.
    assert "gram ms" in result.stdout
    assert re.search(r"\n  structured \(2 prompts\): plain \d+\.\d tok/s, \d+\.\d\d ms a pass \(\d+\.\d{3} ms a row\); auto × plain \d+\.\d\d, "
                     r"\d+\.\d\d tok/pass, \d+\.\d\d ms a pass \(\d+\.\d{3} ms a row\), \d+ forced tokens drafted, \d+\.\d% kept\n",
                     result.stdout), result.stdout


@pytest.mark.parametrize(("record", "says"), [
    ({"response_format": "json"}, "response_format must be an object whose type is text, json_object or json_schema, not 'json'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 'response_format of type json_schema needs "json_schema"'),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_stock_price"}}},
     "tool_choice names the function 'get_stock_price', which `tools` does not offer (get_weather, get_local_time)"),
    ({"tool_choice": "required"}, "tool_choice 'required' asks for a tool call, but the request offers no `tools`"),
    ({"tools": [{"name": "get_weather"}], "tool_choice": "required"}, '"tools" must be a list of OpenAI tools'),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "A forced tool call (tool_choice) already fixes"),
    ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "yes"}, '"parallel_tool_calls" must be true or false'),
])
def test_a_bad_structured_record_is_a_usage_error_naming_its_line(tmp_path, record, says):
    path = write_prompts(tmp_path / "p.jsonl", {"id": "fine", "prompt": "hello"}, {"id": "bad", "prompt": "hello", **record})
    with pytest.raises(UsageError, match=re.escape(f"p.jsonl, line 2 (bad): {says}")):
        load_prompts(path)


def test_a_bad_structured_record_stops_the_bench_before_the_pair_loads(tmp_path, tiny):
    path = write_prompts(tmp_path / "p.jsonl", {"id": "bad", "prompt": "hi", "tools": TOOLS,
                                                "tool_choice": {"type": "function", "function": {"name": "send_email"}}})
    result = subprocess.run([sys.executable, "-m", "localspec", "bench", "--target", str(tiny["target"]), "--prompts", str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "p.jsonl, line 1 (bad): tool_choice names the function 'send_email'" in result.stderr
    assert "Traceback" not in result.stderr and "loading the pair" not in result.stderr


def test_the_bundled_structured_category_asks_for_tools_and_schemas():
    """Tool calls (one, several at once, a named one with a nested schema), extraction to a strict schema, and JSON mode."""
    structured = [p for p in load_prompts(None) if p.category == "structured"]
    assert all(p.grammar is not None for p in structured) and 5 <= len(structured) <= 8
    forced = [p.tool_request for p in structured if p.tool_request.forced_schema is not None]
    assert any(request.parallel for request in forced) and any(not request.parallel for request in forced)
    formats = {p.response_format["type"] for p in structured if p.response_format is not None}
    assert formats == {"json_schema", "json_object"}


def test_bench_serve_sends_plain_chat_and_leaves_structured_prompts_to_the_bench():
    result = subprocess.run([sys.executable, "-m", "localspec", "bench-serve", "http://127.0.0.1:9", "--only", "structured"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "every prompt chosen asks for structured output (tool-call-weather" in result.stderr
    assert "`localspec bench` measures those" in result.stderr and "Traceback" not in result.stderr


def test_lockstep_holds_each_answer_to_its_own_grammar_on_either_context(tmp_path, tiny):
    """In lockstep two answers advance a token each in turn, one on a second context: each has a grammar state of its own."""
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "localspec", "bench", "--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--only",
         "json-invoices,json-mode-reviews", "--drafters", "none", "--lockstep", "--rounds", "2", "--max-tokens", "24", "--json", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    runs = json.loads(out.read_text())["measurements"]
    assert len(runs) == 2 * 2 * 2 and all(m["stats"]["grammar_rows"] > 0 and m["departs_at"] is None for m in runs)
    for m in runs:
        if len(m["tokens"]) < 24:  # the grammar ended the answer: a whole JSON object
            assert isinstance(json.loads(m["text"]), dict), m["text"]
