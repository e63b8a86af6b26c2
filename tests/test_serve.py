"""`localspec serve` on loopback, spoken to by the official OpenAI client and by raw HTTP, with the tiny models."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import openai
import pytest

from localspec.engine import prompt_passes
from localspec.engine.generation_config import GenerationConfig
from localspec.serve.tool_calls import parse_tool_calls
from tests.conftest import cli
from tests.live_server import LiveServer, live_server
from tests.lossless import plain_text

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory) -> LiveServer:
    with live_server(tmp_path_factory.mktemp("serve"), "--target", str(tiny["target"]), "--draft", str(tiny["near"]),
                     "--alias", "tiny", "--drafter", "model") as live:
        yield live


def client(server: LiveServer, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kwargs.pop("api_key", "unused"), max_retries=0, **kwargs)


def test_chat_is_the_targets_own_text_with_usage_timings_and_our_statistics(server, tiny):
    expected = plain_text(tiny["target"], "hello there", 30)
    reply = client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello there"}],
                                                   max_tokens=30, temperature=0)
    assert reply.choices[0].message.content == expected  # lossless through the server
    assert reply.choices[0].finish_reason == "length" and reply.model == "tiny"
    assert reply.usage.completion_tokens == 30 and reply.usage.prompt_tokens > 0
    extra = reply.model_extra
    assert extra["timings"]["predicted_n"] == 30 and extra["timings"]["draft_n"] > 0 and "draft_n_accepted" in extra["timings"]
    assert extra["localspec"]["drafter"] == "model" and extra["localspec"]["acceptance_by_position"]

    chunks = list(client(server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=30, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 30 and chunks[-1].choices == []
    last = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    # the same conversation, but shorter than a prompt pass: read whole again, as a fresh server would (prompt_passes)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == last.model_extra["timings"]["cache_n"] == 0
    assert re.search(r"#\d+ chat, streamed · 30 tokens · [\d.]+ tok/s · model · accepted \d+%", server.log_text())


def test_stop_strings_max_tokens_seeds_and_per_request_drafting(server):
    api = client(server)
    text = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=30).choices[0].message.content
    stop = text[5:9]
    stopped = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=30, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop" and stop not in stopped.choices[0].message.content
    sampled = [api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=12,
                                           temperature=1.0, seed=7).choices[0].message.content for _ in range(2)]
    assert sampled[0] == sampled[1]
    plain = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8,
                                        extra_body={"speculative.n_max": 0})
    assert plain.model_extra["localspec"]["drafter"] == "none" and "draft_n" not in plain.model_extra["timings"]


def test_autos_choices_by_source_in_the_statistics_and_slots(server):
    """Issue 75: what auto ran (plain, lookup, the draft model...) is the same split generate and the app show."""
    reply = client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "tell me everything"}],
                                                   max_tokens=40, extra_body={"localspec": {"drafter": "auto"}})
    stats = reply.model_extra["localspec"]
    split = stats["decisions_by_source"]
    assert stats["drafter"] == "auto" and split and sum(share["steps"] for share in split.values()) == stats["n_steps"]
    assert sum(share["tokens"] for share in split.values()) == reply.usage.completion_tokens - 1  # the first: the prompt's pass
    status, slot_list = server.request("GET", "/slots")
    assert status == 200 and any(s["localspec"]["decisions_by_source"] for s in slot_list)


def test_completions_native_completion_and_the_prompt_cache(server):
    api = client(server)
    done = api.completions.create(model="tiny", prompt="the cat sat on the mat", max_tokens=6)
    assert done.choices[0].text and done.usage.completion_tokens == 6 and done.choices[0].finish_reason == "length"
    status, first = server.request("POST", "/completion", {"prompt": "the quick brown fox jumps " * 20, "n_predict": 0})
    assert status == 200 and first["tokens_predicted"] == 0 and first["content"] == ""  # n_predict 0: only the cache warms
    status, second = server.request("POST", "/completion", {"prompt": "the quick brown fox jumps " * 20 + "over", "n_predict": 4})
    reread = prompt_passes.MIN_PASS + prompt_passes.ALIGN  # at most a last full pass is read again (prompt_passes)
    assert status == 200 and second["timings"]["cache_n"] >= first["tokens_evaluated"] - reread and second["tokens_predicted"] == 4
    status, streamed = server.request("POST", "/completion", {"prompt": "hello", "n_predict": 3, "stream": True})
    events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: ")]
    assert events[-1]["stop"] and events[-1]["timings"]["predicted_n"] == 3 and all(not e["stop"] for e in events[:-1])


def test_n_predict_and_the_native_completions_route_as_llama_server_has_them(server):
    """n_predict was ignored on /completions and /v1/completions (183 tokens for 4), and /completions answered in OpenAI's
    shape where llama-server treats it as its native /completion."""
    status, native = server.request("POST", "/completions", {"prompt": "def add(a, b):\n", "n_predict": 4})
    assert status == 200 and native["tokens_predicted"] == 4 and "content" in native and "choices" not in native
    status, openai_shape = server.request("POST", "/v1/completions", {"prompt": "def add(a, b):\n", "n_predict": 4})
    assert status == 200 and openai_shape["usage"]["completion_tokens"] == 4 and openai_shape["choices"][0]["finish_reason"] == "length"


def test_a_stop_word_is_named_in_the_native_answer(server):
    status, full = server.request("POST", "/completion", {"prompt": "hello there", "n_predict": 30})
    word = full["content"][5:9]
    status, stopped = server.request("POST", "/completion", {"prompt": "hello there", "n_predict": 30, "stop": ["zzzz", word]})
    assert status == 200 and stopped["stop_type"] == "word" and stopped["stopping_word"] == word, stopped
    assert full["stopping_word"] == "" and full["stop_type"] == "limit"


def test_response_fields_and_the_stream_keys_clients_read(server):
    """llama.vim asks /infill and /completion for flat keys ("timings/prompt_n") through response_fields; streams carry
    index, tokens_predicted and tokens_evaluated on every chunk, as llama-server's do."""
    fields = ["content", "timings/prompt_n", "timings/no_such_key", "tokens_predicted"]
    status, picked = server.request("POST", "/completion", {"prompt": "hello", "n_predict": 3, "response_fields": fields})
    assert status == 200 and set(picked) == {"content", "timings/prompt_n", "tokens_predicted"} and picked["tokens_predicted"] == 3, picked
    status, streamed = server.request("POST", "/completion", {"prompt": "hello", "n_predict": 3, "stream": True})
    events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: ")]
    partial = [e for e in events if not e["stop"]]
    assert partial and all({"index", "content", "tokens", "tokens_predicted", "tokens_evaluated"} <= e.keys() for e in partial)
    assert [e["tokens_predicted"] for e in partial] == sorted(e["tokens_predicted"] for e in partial) and events[-1]["index"] == 0


def test_apply_template_renders_the_prompt_a_chat_would_read_and_embeddings_are_refused(server):
    messages = [{"role": "user", "content": "hello there"}]
    status, rendered = server.request("POST", "/apply-template", {"messages": messages})
    assert status == 200 and rendered["prompt"] == "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n", rendered
    for path in ("/v1/embeddings", "/embeddings", "/embedding"):
        status, answer = server.request("POST", path, {"input": "hello", "model": "tiny"})
        assert status == 501 and "embeddings" in answer["error"]["message"], (path, answer)


@pytest.mark.parametrize("path, option, value", [
    ("/v1/chat/completions", "n", 2), ("/v1/chat/completions", "logprobs", True), ("/v1/chat/completions", "top_logprobs", 3),
    ("/v1/completions", "logprobs", 2), ("/v1/completions", "best_of", 3), ("/completion", "n_probs", 5), ("/completion", "return_tokens", True),
])
def test_options_the_server_does_not_honour_get_a_400_naming_them(server, path, option, value):
    """Dropped without a word, n=2 returned one choice and logprobs none: a client reading them failed further on."""
    body = {"model": "tiny", "max_tokens": 2, "n_predict": 2, option: value}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    status, answer = server.request("POST", path, body)
    assert status == 400 and answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"].startswith(option), answer
    status, fine = server.request("POST", path, body | {option: 1 if option in ("n", "best_of") else None})
    assert status == 200, fine


def test_models_health_props_tokenize_and_metrics(server):
    client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=12)
    models = client(server).models.list().data
    assert [m.id for m in models] == ["tiny"] and models[0].model_extra["meta"]["n_ctx"] > 0
    assert server.request("GET", "/health") == (200, {"status": "ok"})
    status, props = server.request("GET", "/props")
    assert status == 200 and props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] > 0  # --parallel's default
    status, tokens = server.request("POST", "/tokenize", {"content": "hello there", "with_pieces": True})
    assert status == 200 and "".join(t["piece"] for t in tokens["tokens"]) == "hello there"
    assert server.request("POST", "/detokenize", {"tokens": [t["id"] for t in tokens["tokens"]]}) == (200, {"content": "hello there"})
    status, slot_list = server.request("GET", "/slots")
    assert status == 200 and [s["id"] for s in slot_list] == [0, 1, 2, 3] and all(s["speculative"] and not s["is_processing"] for s in slot_list)
    drafted, accepted = (sum(s["localspec"][key] for s in slot_list) for key in ("draft_n", "draft_n_accepted"))
    assert drafted >= accepted > 0
    status, metrics = server.request("GET", "/metrics")
    assert status == 200 and re.search(r"^llamacpp:spec_decode_num_draft_tokens_total \d+", metrics, re.MULTILINE)
    assert re.search(r'^llamacpp:spec_decode_num_accepted_tokens_per_pos\{position="0"\} \d+', metrics, re.MULTILINE)


BAD = [
    ("POST", "/v1/chat/completions", b'{"messages": [', 400, "not valid JSON"),
    ("POST", "/v1/chat/completions", b'{"messages": "hi"}', 400, "messages"),
    ("POST", "/v1/chat/completions", b'{"messages": []}', 400, "at least 1 item"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', 400, "temperature must be"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}', 400, "max_tokens"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "localspec.drafter": "magic"}', 400,
     "localspec.drafter must be one of"),
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "word " * 5000}]}).encode(), 400,
     "leaving no room for an answer"),
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                 "tools": [{"type": "function", "function": {"name": "f"}}]}).encode(), 400, "does not render tools"),
    ("POST", "/v1/completions", b'{"prompt": "x", "suffix": "y"}', 501, "no fill-in-the-middle tokens"),
    ("POST", "/infill", b'{"input_prefix": "x", "input_suffix": "y"}', 501, "no fill-in-the-middle tokens"),
    ("GET", "/v1/nothing", None, 404, "No route GET /v1/nothing"),
    ("POST", "/detokenize", b'{"tokens": [-5]}', 400, "must be ids"),
    # Issue 57: each of these was accepted, then ignored
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}).encode(),
     400, "messages.0.content: Value error, a 'image_url' part cannot be read: this server runs a text-only model"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "bogus", "content": "hi"}]}', 400, "messages.0.role: Value error, role 'bogus' is not one of"),
    # Issue 75: 0 got "must be 1 or more" and -5 "must be 0 or more"; both are below OpenAI's minimum of 1
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}', 400, "max_tokens = -5: it must be 1 or more"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', 400, "max_tokens = 0: it must be 1 or more"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}', 400,
     "max_completion_tokens = 0: it must be 1 or more"),
    ("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": 0}', 400, "max_tokens = 0: it must be 1 or more"),
    # Issue 75: "yes" was read as true; a boolean is a JSON boolean
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', 400,
     "stream: Input should be a valid boolean"),
    ("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": 2, "echo": 1}', 400, "echo: Input should be a valid boolean"),
    ("POST", "/completion", b'{"prompt": "hi", "n_predict": 2, "stream": "true"}', 400, "stream: Input should be a valid boolean"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true, '
                                     b'"stream_options": {"include_usage": "yes"}}', 400, "stream_options.include_usage: Input should be a valid boolean"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "audio": {"voice": "alloy", "format": "wav"}, '
                                     b'"modalities": ["text", "audio"]}', 400, "this server answers in text only"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "prediction": {"type": "content", "content": "x"}}',
     400, "prediction is not supported"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"99999999": 5}}', 400,
     "logit_bias: token 99999999 is not in the vocabulary"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 3}', 400,
     "frequency_penalty = 3.0: it must be from -2 to 2"),
    ("POST", "/completion", b'{"prompt": "hi", "repeat_penalty": 1.1}', 400, "repeat_penalty = 1.1 is not supported"),
    ("POST", "/completion", b'{"n_predict": 4}', 400, "`prompt` is empty"),
    ("POST", "/v1/completions", b'{"prompt": ""}', 400, "`prompt` is empty"),
]


@pytest.mark.parametrize(("method", "path", "raw", "status", "words"), BAD)
def test_bad_input_gets_the_openai_error_shape_and_the_server_goes_on(server, method, path, raw, status, words):
    got, body = server.request(method, path, raw=raw)
    assert got == status and set(body["error"]) == {"message", "type", "code"} and words in body["error"]["message"], body
    if "no room" in words:
        assert body["error"]["type"] == "exceed_context_size_error"
    assert server.request("GET", "/health")[0] == 200 and server.process.poll() is None


def test_min_p_1_keeps_only_the_top_token_so_sampling_gives_the_greedy_text(server, tiny):
    """Issue 75: min_p 1.0 was refused; llama.cpp takes it, and keeps only the tokens at the top probability."""
    expected = plain_text(tiny["target"], "hello there", 20)
    for seed in (1, 2, 3):
        reply = client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=20,
                                                       temperature=1.5, seed=seed, extra_body={"min_p": 1.0, "top_k": 0})
        assert reply.choices[0].message.content == expected, seed
    status, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "min_p": 1.5})
    assert status == 400 and "min-p must be from 0 to 1, not 1.5" in body["error"]["message"], body


def test_penalties_and_logit_bias_act_on_the_target_and_speculation_stays_lossless_against_it(server, tiny):
    """Issue 57: frequency_penalty 2.0 and presence_penalty 2.0 gave output byte-identical to none. Now the penalised
    target's own greedy text comes back, drafted and all (the server drafts with the model drafter here)."""
    from localspec.engine.engine import Engine, EngineConfig
    from localspec.engine.penalties import Penalties
    from tests.conftest import run

    prompt_text = "the cat sat on the mat and the cat sat on the mat and"
    with Engine(EngineConfig(tiny["target"])) as engine:
        prompt = engine.target.vocab.tokenize(prompt_text, add_special=True, parse_special=True)

        def plain(penalties: Penalties | None) -> tuple[str, list[int]]:
            done = run(engine.plain, prompt, GenerationConfig(max_tokens=24, penalties=penalties))
            return done.text, done.tokens

        (unpenalised, tokens), (penalised, _) = plain(None), plain(Penalties(frequency=2.0, presence=2.0))
        banned = tokens[0]
        without_first, others = plain(Penalties(bias={banned: -np.inf}))
    assert penalised != unpenalised and others[0] != banned

    def served(**fields: object) -> dict[str, Any]:
        status, body = server.request("POST", "/completion", {"prompt": prompt_text, "n_predict": 24, "temperature": 0, **fields})
        assert status == 200, body
        return body

    assert served()["content"] == unpenalised
    answer = served(frequency_penalty=2.0, presence_penalty=2.0)
    assert answer["content"] == penalised and answer["timings"]["draft_n"] > 0  # drafted, and still the penalised target's text
    assert served(logit_bias=[[banned, False]])["content"] == without_first  # llama.cpp's form: false bans the token
    reply = client(server).completions.create(model="tiny", prompt=prompt_text, max_tokens=24, temperature=0, logit_bias={str(banned): -100})
    assert reply.choices[0].text == without_first  # OpenAI's form


def test_echo_tokens_cached_lower_case_bearer_and_a_body_sent_as_a_form(server):
    """Issue 57: echo was ignored, tokens_cached was always 0, and curl's default Content-Type got a 400."""
    api = client(server)
    echoed = api.completions.create(model="tiny", prompt="the cat sat", max_tokens=4, echo=True)
    plain = api.completions.create(model="tiny", prompt="the cat sat", max_tokens=4)
    assert echoed.choices[0].text == "the cat sat" + plain.choices[0].text
    streamed = "".join(c.choices[0].text for c in api.completions.create(model="tiny", prompt="the cat sat", max_tokens=4, echo=True,
                                                                       stream=True) if c.choices)
    assert streamed == echoed.choices[0].text
    status, native = server.request("POST", "/completion", {"prompt": "the cat sat", "n_predict": 4})
    assert status == 200 and native["tokens_cached"] == native["tokens_evaluated"] + native["tokens_predicted"] > 4
    status, body = server.request("POST", "/completion", {"prompt": "the cat sat", "n_predict": 2},
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})  # what `curl -d` sends
    assert status == 200 and body["tokens_predicted"] == 2


def test_unknown_fields_are_ignored(server):
    status, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                                                                    "max_tokens": 2, "frequency_penalty": 0.5, "cache_prompt": True})
    assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_a_client_that_leaves_mid_stream_frees_the_engine(tiny, tmp_path):
    with live_server(tmp_path, "--target", str(tiny["talkative"]), "--draft", str(tiny["talkative_draft"]), "--ctx-size", "16384") as server:
        request = urllib.request.Request(server.url + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"messages": [{"role": "user", "content": "tell me everything"}],
                                                          "max_tokens": 100_000, "stream": True}).encode())
        response = urllib.request.urlopen(request, timeout=60)
        assert response.readline().startswith(b"data: ")
        response.close()  # the editor's user typed on: the stream is dropped
        started = time.monotonic()
        reply = client(server).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert reply.usage.completion_tokens == 4 and time.monotonic() - started < 30
        # the client may leave before the first token or after some: either way the generation stops there
        cut = re.search(r"chat, streamed · (\d+) tokens .*cancelled \(the client left\)", server.log_text())
        assert cut is not None and int(cut[1]) < 16000, server.log_text()  # stopped, not run to the end of the context


def test_twenty_requests_at_once_all_complete_in_order(tiny, tmp_path):
    """With one slot, sent at once: each is answered (none lost, none duplicated), and the server serves them in arrival
    order: its log lists their task numbers (llama.cpp's id_task, counted as they arrive) in increasing order."""
    with live_server(tmp_path, "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--parallel", "1") as server:
        _twenty_at_once(server)


def _twenty_at_once(server: LiveServer) -> None:
    results: dict[int, int] = {}

    def ask(index: int) -> None:
        status, body = server.request("POST", "/completion", {"prompt": f"request {index}", "n_predict": 3})
        assert status == 200 and body["stop"]
        results[index] = body["id_task"]

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results) == list(range(20)) and len(set(results.values())) == 20
    served = [int(n) for n in re.findall(r"^  #(\d+) completion · ", server.log_text(), re.MULTILINE) if int(n) in results.values()]
    assert served == sorted(results.values())


def test_the_api_key_is_required_everywhere_but_health(tiny, tmp_path):
    with live_server(tmp_path, "--target", str(tiny["target"]), "--api-key", "sesame") as server:
        assert server.request("GET", "/health")[0] == 200
        status, body = server.request("GET", "/v1/models")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client(server, api_key="wrong").models.list()
        assert [m.id for m in client(server, api_key="sesame").models.list().data] == ["target"]
        assert server.request("POST", "/tokenize", {"content": "a"}, headers={"X-Api-Key": "sesame"})[0] == 200
        for scheme in ("bearer", "BEARER"):  # issue 57: RFC 7235 schemes are case-insensitive; "bearer K" got 401
            assert server.request("GET", "/v1/models", headers={"Authorization": f"{scheme} sesame"})[0] == 200


def test_a_browser_page_on_another_origin_may_call_the_server_with_the_key_still_required(tiny, tmp_path):
    """Issue 75: a preflight got 405 and no Access-Control-Allow-Origin was sent, so a web page on another origin could
    not use the server (llama-server answers it). A preflight carries no key; the request itself still needs it."""
    origin = {"Origin": "http://localhost:5173"}
    preflight = origin | {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with live_server(tmp_path, "--target", str(tiny["target"]), "--api-key", "sesame") as server, httpx2.Client(base_url=server.url) as http:
        answer = http.options("/v1/chat/completions", headers=preflight)
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "*", answer.headers
        assert "POST" in answer.headers["access-control-allow-methods"]
        assert "authorization" in answer.headers["access-control-allow-headers"].lower()
        refused = http.post("/v1/chat/completions", json=chat, headers=origin)
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"  # the page can read why
        served = http.post("/v1/chat/completions", json=chat, headers=origin | {"Authorization": "Bearer sesame"})
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == "*", served.text
        assert served.json()["usage"]["completion_tokens"] == 2
        streamed = http.post("/v1/chat/completions", json=chat | {"stream": True}, headers=origin | {"Authorization": "Bearer sesame"})
        assert streamed.status_code == 200 and streamed.headers["access-control-allow-origin"] == "*"
        assert streamed.text.rstrip().endswith("data: [DONE]")


def test_listening_beyond_this_machine_needs_a_key(tiny):
    refused = cli("serve", "--target", str(tiny["target"]), "--host", "0.0.0.0")
    assert refused.returncode == 2 and "--api-key" in refused.stderr and "--insecure-no-api-key" in refused.stderr


def test_tool_calls_are_parsed_from_each_supported_format():
    names = frozenset({"get_weather"})
    hermes = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    llama = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
    fenced = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
    for text, content in ((hermes, "Let me check.\n"), (llama, ""), (fenced, "")):
        got_content, calls = parse_tool_calls(text, names)
        assert got_content == content and [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert parse_tool_calls('{"name": "rm_rf", "arguments": {}}', names) == ('{"name": "rm_rf", "arguments": {}}', [])  # not offered
    assert parse_tool_calls("plain <b>text</b>", names) == ("plain <b>text</b>", [])


PARIS, TOKYO = ("get_weather", {"city": "Paris"}), ("get_time", {"zone": "Asia/Tokyo"})
TWO_TOOLS = frozenset({"get_weather", "get_time"})
WEATHER_JSON, TIME_JSON = '{"name": "get_weather", "arguments": {"city": "Paris"}}', '{"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}'
SEVERAL_CALLS = [  # (the answer as a model wrote it, the content left once the calls are out)
    (f"<tool_call>\n{WEATHER_JSON}\n</tool_call>\n<tool_call>\n{TIME_JSON}\n</tool_call>", "\n"),  # Qwen's blocks
    (f"```json\n[\n  {WEATHER_JSON},\n  {TIME_JSON}\n]\n```", ""),  # issue 75: Qwen2.5-Coder's answer with auto
    (f"I'll call both.\n```json\n[{WEATHER_JSON}, {TIME_JSON}]\n```\nOne moment.", "I'll call both.\n\nOne moment."),
    (f"```json\n{WEATHER_JSON}\n```\n```json\n{TIME_JSON}\n```", "\n"),
    (f"```json\n{json.dumps(json.loads(WEATHER_JSON), indent=2)}\n{json.dumps(json.loads(TIME_JSON), indent=2)}\n```", ""),  # issue 75: what auto got
    (f"[{WEATHER_JSON}, {TIME_JSON}]", ""),
    (f'<|python_tag|>{WEATHER_JSON.replace("arguments", "parameters")}; {TIME_JSON.replace("arguments", "parameters")}', ""),  # Llama 3.x
]


@pytest.mark.parametrize(("text", "content"), SEVERAL_CALLS)
def test_several_calls_are_parsed_from_the_formats_real_models_write_whole_and_streamed(text, content):
    """Issue 75: a fenced JSON list of two calls came back as content with finish_reason "stop"."""
    from localspec.serve.answer import AnswerShaper

    got_content, calls = parse_tool_calls(text, TWO_TOOLS)
    assert got_content == content and [(c.name, json.loads(c.arguments)) for c in calls] == [PARIS, TOKYO]
    shaper = AnswerShaper(reasoning=False, thinking_open=False, tools=TWO_TOOLS)
    deltas = [shaper.feed(text[i : i + 2]) for i in range(0, len(text), 2)] + [shaper.end()]
    assert "".join(d.content for d in deltas) == content
    assert [(c.name, json.loads(c.arguments)) for d in deltas for c in d.calls] == [PARIS, TOKYO]
    kept, one = parse_tool_calls(text, TWO_TOOLS, parallel=False)  # one call at most: the second stays text, not dropped
    assert len(one) <= 1 and "get_time" in kept and "get_time" not in [c.name for c in one]


def test_json_that_is_not_a_call_to_an_offered_tool_stays_text():
    for text in (f"```json\n[{WEATHER_JSON}, {{\"name\": \"rm_rf\", \"arguments\": {{}}}}]\n```",  # one names no offered tool
                 'Config:\n```json\n{"debug": true}\n```', "[1] a list\n", '{"a": "b; c"}', "```json\n{\"name\": \"get_weather\""):
        assert parse_tool_calls(text, TWO_TOOLS) == (text, []), text
    content, calls = parse_tool_calls(f"<tool_call>\n{WEATHER_JSON}\n", TWO_TOOLS)  # an answer that stopped at </tool_call>
    assert content == "" and [c.name for c in calls] == ["get_weather"]
    cut = f"<tool_call>\n{WEATHER_JSON[:30]}"  # cut by max_tokens: the text it is
    assert parse_tool_calls(cut, TWO_TOOLS) == (cut, [])


def test_a_forced_call_with_parallel_calls_allowed_is_a_list_of_them():
    from localspec.serve.answer import ForcedCall
    from localspec.session.structured_output import forced_call_schema

    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in sorted(TWO_TOOLS)]
    several = forced_call_schema(tools, "required")
    assert several is not None and several["type"] == "array" and several["minItems"] == 1 and len(several["items"]["anyOf"]) == 2
    one = forced_call_schema(tools, "required", parallel=False)
    assert one is not None and "anyOf" in one and "type" not in one
    forced = ForcedCall()
    forced.feed(f"[{WEATHER_JSON}, ")
    assert [(c.name, json.loads(c.arguments)) for c in [*forced.feed(TIME_JSON + "]").calls, *forced.end().calls]] == [PARIS, TOKYO]


def test_the_readme_lists_every_route(server):
    from localspec.serve.app import create_app
    from localspec.serve.options import ServeOptions
    from localspec.serve.state import ServerState

    app = create_app(ServerState(ServeOptions()))
    routes = {path for route in app.routes if (path := getattr(route, "path", ""))}
    text = README.read_text(encoding="utf-8")
    missing = sorted(path for path in routes if f"`{path}`" not in text)
    assert not missing, f"README does not list {missing}"


def test_reasoning_and_calls_are_split_out_of_a_stream_piece_by_piece():
    from localspec.serve.answer import AnswerShaper

    answer = 'Let me think.\nParis, so get_weather.</think>Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    shaper = AnswerShaper(reasoning=True, thinking_open=True, tools=frozenset({"get_weather"}))  # R1-style: the prompt opened <think>
    deltas = [shaper.feed(answer[i : i + 3]) for i in range(0, len(answer), 3)] + [shaper.end()]
    assert "".join(d.reasoning for d in deltas) == "Let me think.\nParis, so get_weather."
    assert "".join(d.content for d in deltas) == "Checking."
    assert [(c.name, json.loads(c.arguments)) for d in deltas for c in d.calls] == [("get_weather", {"city": "Paris"})]
    early = [i for i, d in enumerate(deltas) if d.reasoning]
    assert early and early[0] < 3  # the reasoning streams as it comes, not at the end
    plain = AnswerShaper(reasoning=True, thinking_open=False, tools=None)
    pieces = [plain.feed("<think>hm</think>"), plain.feed("Hello <b>"), plain.end()]
    assert "".join(d.reasoning for d in pieces) == "hm" and "".join(d.content for d in pieces) == "Hello <b>"


def requests_completed(url: str) -> int:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    return int(float(next(line.split()[1] for line in text.splitlines() if line.startswith("llamacpp:requests_total"))))


def test_bench_serve_loads_the_server_with_concurrent_clients(server):
    before = requests_completed(server.url)
    result = cli("bench-serve", server.url, "--clients", "1,2", "--rounds", "2", "--max-tokens", "4", "--only", "code-writing")
    assert result.returncode == 0, result.stderr
    # The clients share the work: at each concurrency every prompt (2 code-writing ones) twice, plus one warm-up.
    assert requests_completed(server.url) - before == 1 + 2 * (2 * 2)
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {"1", "2"} and all(row[-1] == "0" and float(row[1]) > 0 for row in rows.values()), result.stdout
    nobody = cli("bench-serve", "http://127.0.0.1:9", "--clients", "1")
    assert nobody.returncode == 1 and "No server answers at http://127.0.0.1:9" in nobody.stderr and "Traceback" not in nobody.stderr


def test_bench_serve_counts_the_tokens_of_the_text_each_server_sent_not_the_usage_it_reports(server):
    """llama.cpp's server counts the end-of-generation token it sampled in `completion_tokens` (a 16-token haiku is 17),
    ours does not: taken from `usage`, llama.cpp read up to 6% faster on the bench's short answers for the same text."""
    from localspec.bench.load import ClientRun, count_tokens

    texts = ["def add(a, b):\n    return a + b\n", "Hello there, how are you?"]
    counted = ClientRun(reported_tokens=999, texts=texts)
    count_tokens(server.url, [counted], None)
    expected = sum(len(server.request("POST", "/tokenize", {"content": text})[1]["tokens"]) for text in texts)
    assert counted.tokens == expected and expected not in (0, 999)
    unreachable = ClientRun(reported_tokens=7, texts=texts)  # a server without /tokenize is taken at its word
    count_tokens("http://127.0.0.1:9", [unreachable], None)
    assert unreachable.tokens == 7
