"""JSON mode and JSON schemas (issue 46, item 3): llama.cpp's grammar holds the target's verification and so every
draft, and the answer is the constrained target's, whichever drafter ran."""

from __future__ import annotations

import json

import openai
import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.grammar import json_grammar
from tests.conftest import run
from tests.live_server import LiveServer, live_server
from tests.lossless import assert_lossless

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
ASK = "Describe a fictional person: their name and their age."


def is_person(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(value.get("age"), int) \
        and not isinstance(value.get("age"), bool)


def test_speculative_answers_under_a_schema_are_the_constrained_targets(real_models):
    target, draft = real_models
    with Engine(EngineConfig(target, draft, n_ctx=2048)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", ASK)])
        runs = {name: run(engine.decoder(name), prompt, GenerationConfig(max_tokens=60, draft_max=4, grammar=engine.target.grammar(
            json_grammar(PERSON)))) for name in ("none", "model", "ngram")}
        free = run(engine.plain, prompt, GenerationConfig(max_tokens=60))
    assert not is_person(_loads(free.text))  # unconstrained, the target writes prose or a fenced block
    for name, answer in runs.items():
        assert is_person(json.loads(answer.text)), (name, answer.text)
        assert_lossless(runs["none"], answer, label=f"{name} under the schema")
    assert runs["model"].finished.stats.draft_n_accepted > 0  # the draft model's drafts were judged, and kept


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def server(real_models, tmp_path_factory) -> LiveServer:
    target, draft = real_models
    with live_server(tmp_path_factory.mktemp("serve-json"), "--target", str(target), "--draft", str(draft), "--ctx-size", "4096") as live:
        yield live


def test_json_object_and_json_schema_through_the_openai_client(server):
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    as_object = api.chat.completions.create(model="any", messages=[{"role": "user", "content": ASK + " Answer in JSON."}], max_tokens=80,
                                            temperature=0, response_format={"type": "json_object"})
    assert isinstance(json.loads(as_object.choices[0].message.content), dict)
    schema = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for stream in (False, True):
        if stream:
            chunks = api.chat.completions.create(model="any", messages=[{"role": "user", "content": ASK}], max_tokens=80,
                                                 temperature=0.7, seed=3, response_format=schema, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = api.chat.completions.create(model="any", messages=[{"role": "user", "content": ASK}], max_tokens=80, temperature=0,
                                               response_format=schema).choices[0].message.content
        assert is_person(json.loads(text)), text
    status, native = server.request("POST", "/completion", {"prompt": "A person as JSON: ", "n_predict": 60, "json_schema": PERSON})
    assert status == 200 and is_person(json.loads(native["content"])), native


@pytest.mark.parametrize("body, says", [
    ({"response_format": {"type": "yaml"}}, "response_format must be an object whose type is"),
    ({"response_format": {"type": "json_schema"}}, '"json_schema": {"name": ..., "schema": {...}}'),
    ({"response_format": {"type": "json_object", "schema": "person"}}, "response_format.schema must be a JSON schema"),
    ({"grammar": "root ::= ("}, "grammar could not be parsed"),
    ({"response_format": {"type": "json_object"}, "localspec": {"drafter": "tree"}}, "tree drafter cannot draft under a grammar"),
])
def test_a_malformed_format_is_a_400_that_says_what_is_wrong(server, body, says):
    status, reply = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                                                    **body})
    assert status == 400 and says in reply["error"]["message"], reply


def test_the_speedup_under_a_schema_is_over_the_constrained_targets_plain_rate(server):
    """Issue 76, item 5: "× plain" divided by the unconstrained target's rate, so an answer that paid its grammar's masks
    looked faster than it was. Under a grammar the rate it divides by is the constrained target's: the baseline (which
    no grammar moves) plus the answer's grammar time per row, each as the same response reports them."""
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    schema = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    held = api.chat.completions.create(model="any", messages=[{"role": "user", "content": ASK}], max_tokens=80, temperature=0,
                                       response_format=schema)
    assert is_person(json.loads(held.choices[0].message.content))
    stats, timings = held.model_extra["localspec"], held.model_extra["timings"]
    assert stats["grammar_rows"] > stats["n_steps"] and stats["grammar_ms_per_row"] > 0 and stats["plain_ms_per_token"] > 0
    assert stats["plain_per_second"] == pytest.approx(1000 / (stats["plain_ms_per_token"] + stats["grammar_ms_per_row"]))
    assert stats["speedup"] == pytest.approx(timings["predicted_per_second"] / stats["plain_per_second"])
    assert stats["plain_per_second"] < 1000 / stats["plain_ms_per_token"]  # the grammar's masks are counted against plain too
    # `{"name": "` and the keys are forced: drafted ahead of auto's own tokens, a source of their own
    assert 0 < stats["forced_n_accepted"] <= stats["forced_n"]
    assert stats["decisions_by_source"]["grammar"]["tokens"] == stats["forced_n_accepted"]
    assert stats["acceptance_by_source"]["grammar"] == pytest.approx(stats["forced_n_accepted"] / stats["forced_n"])
    free = api.chat.completions.create(model="any", messages=[{"role": "user", "content": ASK}], max_tokens=16, temperature=0)
    unheld = free.model_extra["localspec"]
    assert unheld["grammar_rows"] == 0 and unheld["grammar_ms_per_row"] == 0 and "grammar" not in unheld["acceptance_by_source"]
    assert unheld["plain_per_second"] == pytest.approx(1000 / unheld["plain_ms_per_token"])
    status, slots = server.request("GET", "/slots")
    assert status == 200 and "grammar" in slots[0]["localspec"]["acceptance_by_source"], slots  # the slot's answers summed
    assert "× plain under its grammar" in server.log_text()
