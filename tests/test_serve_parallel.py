"""`localspec serve --parallel N`: several clients at once over HTTP, each answered as if it were alone (tiny models)."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.conftest import cli
from tests.live_server import LiveServer, live_server
from tests.lossless import plain_text

PROMPTS = ["hello there", "tell me something", "the theater", "are there trees"]


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory) -> LiveServer:
    with live_server(tmp_path_factory.mktemp("serve-parallel"), "--target", str(tiny["target"]), "--draft", str(tiny["near"]),
                     "--alias", "tiny", "--parallel", "4", "--ctx-size", "512") as live:
        yield live


@pytest.fixture(scope="module")
def alone(tiny) -> dict[str, str]:
    return {prompt: plain_text(tiny["target"], prompt, 24) for prompt in PROMPTS}


def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(server: LiveServer, prompt: str, drafter: str = "auto", max_tokens: int = 24) -> str:
    reply = client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                                                   temperature=0, extra_body={"localspec": {"drafter": drafter}})
    return reply.choices[0].message.content


def test_clients_at_once_each_get_the_answer_they_get_alone(server, alone):
    drafters = ["auto", "model", "ngram", "none", "hybrid", "hierarchical"]  # every one that shares a batch but self
    jobs = [(PROMPTS[i % 4], drafters[i // 4]) for i in range(4 * len(drafters))]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda job: ask(server, *job), jobs))
    assert answers == [alone[prompt] for prompt, _ in jobs]
    status, slots = server.request("GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0, 1, 2, 3] and all(s["n_ctx"] == 512 for s in slots)
    assert sum(s["localspec"]["draft_n"] for s in slots) > 0
    assert server.request("GET", "/props")[1]["total_slots"] == 4
    status, metrics = server.request("GET", "/metrics")
    assert re.search(r"^llamacpp:tokens_predicted_total (\d+)", metrics, re.MULTILINE)


def test_a_client_that_leaves_frees_its_slot_and_the_others_do_not_change(server, alone):
    request = urllib.request.Request(server.url + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"messages": [{"role": "user", "content": "tell me everything"}],
                                                      "max_tokens": 400, "stream": True}).encode())
    results: dict[str, str] = {}

    def others() -> None:
        with ThreadPoolExecutor(3) as pool:
            results.update(zip(PROMPTS[:3], pool.map(lambda prompt: ask(server, prompt), PROMPTS[:3])))

    response = urllib.request.urlopen(request, timeout=60)
    thread = threading.Thread(target=others)
    thread.start()
    for _ in range(3):
        assert response.readline().startswith(b"data: ") and response.readline() == b"\n"
    response.close()  # the client leaves mid-answer
    thread.join(120)
    assert results == {prompt: alone[prompt] for prompt in PROMPTS[:3]}
    assert re.search(r"chat, streamed · \d+ tokens .*cancelled \(the client left\)", server.log_text())
    # its slot's cells went with it: no slot holds the 400-token answer
    slots = server.request("GET", "/slots")[1]
    assert all(s["localspec"]["tokens_cached"] < 300 for s in slots)


def test_a_prompt_too_long_for_a_slot_gets_a_clear_400_and_the_others_go_on(server, alone):
    with ThreadPoolExecutor(2) as pool:
        fine = pool.submit(ask, server, "hello there")
        with pytest.raises(openai.BadRequestError, match="a slot holds 512"):
            ask(server, "the theater " * 300)
        assert fine.result() == alone["hello there"]


def test_a_seeded_request_draws_from_its_own_stream_while_others_sample(server):
    """Its random numbers are its own: the same seed writes the same answer alone and beside three requests sampling
    at once (on these tiny models a shared pass gives every slot the logits it gets alone, so only a stream another
    request drew from could make it differ)."""
    def sample(prompt: str, seed: int | None, max_tokens: int = 32) -> str:
        reply = client(server).chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                                       max_tokens=max_tokens, temperature=1.0, seed=seed)
        return reply.choices[0].message.content

    alone = sample("tell me something", 42)
    with ThreadPoolExecutor(4) as pool:
        others = [pool.submit(sample, prompt, None, 64) for prompt in ("hello there", "the theater", "are there trees")]
        among = pool.submit(sample, "tell me something", 42)
        assert among.result() == alone and all(other.result() for other in others)
    assert sample("tell me something", 43) != alone  # the seed decides the answer


def test_a_burst_of_fifty_requests_over_eight_slots(tiny, tmp_path, alone):
    """Each completes once, with its own answer (none lost, none duplicated, none crossed with another's)."""
    with live_server(tmp_path, "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--parallel", "8",
                     "--ctx-size", "256") as server:
        jobs = [PROMPTS[i % 4] for i in range(50)]
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda prompt: ask(server, prompt, max_tokens=24), jobs))
        assert answers == [alone[prompt] for prompt in jobs]
        tasks = [int(n) for n in re.findall(r"#(\d+) chat · ", server.log_text())]
        assert sorted(tasks) == list(range(1, 51))  # every request ran exactly once
        slots = server.request("GET", "/slots")[1]
        assert len(slots) == 8 and not any(s["is_processing"] for s in slots)
        assert all(s["localspec"]["tokens_cached"] <= 256 for s in slots)


def test_drafters_that_need_a_slot_to_themselves_are_refused_clearly(server, tiny):
    said = "The tree drafter needs a sequence of its own, so it runs one request at a time (--parallel 1); several slots run auto"
    with pytest.raises(openai.BadRequestError, match=said.replace("(", r"\(").replace(")", r"\)")):  # one wording at both doors
        ask(server, "hello there", drafter="tree")
    result = cli("serve", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--parallel", "2", "--drafter", "tree")
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr
    result = cli("serve", "--target", str(tiny["target"]), "--parallel", "0")
    assert result.returncode == 2 and "--parallel 0 is out of range" in result.stderr


def test_native_responses_name_their_slot_as_slots_shows_it(server):
    for text in ("hello there", "the theater"):
        status, body = server.request("POST", "/completion", {"prompt": text, "n_predict": 4})
        assert status == 200 and 0 <= body["id_slot"] < 4
        rows = {row["id"]: row for row in server.request("GET", "/slots")[1]}
        assert rows[body["id_slot"]]["id_task"] == body["id_task"]


def test_the_context_a_client_reads_is_a_slots_share(server):
    """--ctx-size is each slot's (512 here: the caches hold 4 x 512). Continue sizes its prompts from n_ctx, and the whole
    context it was told (2048) overfilled a slot: a 400."""
    props = server.request("GET", "/props")[1]
    models = server.request("GET", "/v1/models")[1]
    slots = server.request("GET", "/slots")[1]
    assert props["default_generation_settings"]["n_ctx"] == models["data"][0]["meta"]["n_ctx"] == 512
    assert {row["n_ctx"] for row in slots} == {512} and props["total_slots"] == 4


def test_autocomplete_on_a_long_file_fits_its_slot(tiny, tmp_path):
    """The fill-in-the-middle prompt is cut to the slot's share of the context, not the whole context's: a file longer
    than a slot is answered (its prefix's end, its suffix's start), never refused as too long."""
    with live_server(tmp_path, "--target", str(tiny["fim"]), "--parallel", "2", "--ctx-size", "512", "--drafter", "none") as live:
        text = "the theater in the other room " * 200  # thousands of tokens before the cursor and after it
        status, reply = live.request("POST", "/infill", {"input_prefix": text, "input_suffix": text, "n_predict": 4})
        assert status == 200, reply
        assert 200 < reply["timings"]["prompt_n"] <= 512 // 2 + 3  # half the slot's share, as /infill budgets it, and 3 FIM tokens
        status, reply = live.request("POST", "/v1/completions", {"prompt": text, "suffix": text, "max_tokens": 4})
        assert status == 200, reply
