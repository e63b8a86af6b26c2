"""Temperature 0 repeats: a prompt's cells and last row come out bit-identical whatever the cache held before it
(engine/prompt_passes.py), so plain greedy decoding writes the same answer fresh, cached and partly cached, through the
engine and through the server, with one slot or four."""

from __future__ import annotations

import json

import numpy as np
import pytest

from localspec.engine.decode import Decoder
from localspec.engine.drafters.base import NoDrafter, Observation, TargetRow
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import cli, run
from tests.live_server import live_server

# About 220 tokens of code: long enough for prompt passes of every kind (a shared prefix, a tail re-read).
TEXT = "".join(f"def scale_{i}(values, factor={i}):\n    return [v * factor + {i % 3} for v in values]\n\n" for i in range(9))
OTHER_TAIL = "class Registry:\n    def __init__(self):\n        self.items = {}\n"
ANSWER_TOKENS = 24


class FirstRow(NoDrafter):
    """Plain decoding that keeps the first row it is shown: the prompt's last, which judges the answer's first token."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def observe(self, seen: Observation) -> None:
        if isinstance(seen, TargetRow) and not self.rows:
            self.rows.append(np.array(seen.row))  # a copy: the logits buffer is llama.cpp's, and the next pass writes over it


def first_row(engine: Engine, prompt: list[int]) -> np.ndarray:
    """The prompt's last row as the decode loop reads it (its cells stay, as after any answer of one token)."""
    keeper = FirstRow()
    run(Decoder(engine.target, keeper), prompt, GenerationConfig(max_tokens=1))
    return keeper.rows[0]


def test_a_prompts_last_row_and_answer_are_the_same_whatever_the_cache_held(real_models):
    """Before: a prompt cached but for its last token re-read that token alone, and its row differed from a fresh
    read's by up to 0.5 in a logit (enough to flip a near-tie, and the answer from there)."""
    target, _ = real_models
    with Engine(EngineConfig(target, n_ctx=2048)) as engine:
        model = engine.target
        prompt = model.vocab.tokenize(TEXT, add_special=False)
        other = model.vocab.tokenize(OTHER_TAIL, add_special=False)
        assert len(prompt) > 200
        model.clear_cache()
        fresh_row = first_row(engine, prompt)
        model.clear_cache()
        fresh = run(engine.plain, prompt, GenerationConfig(max_tokens=ANSWER_TOKENS)).tokens

        def answer_after_it() -> None:
            first_row(engine, prompt)
            for token in fresh[:6]:
                model.decode([token], outputs=1)

        before = {
            "the same prompt": lambda: first_row(engine, prompt),
            "the same prompt and an answer": answer_after_it,
            "its first 100 tokens and another tail": lambda: first_row(engine, prompt[:100] + other),
            "its first 150 tokens, an answer's length away from its end": lambda: first_row(engine, prompt[:150]),
            "a longer prompt holding it": lambda: first_row(engine, prompt + other),
            "another prompt": lambda: first_row(engine, other * 3),
        }
        for name, fill in before.items():
            fill()
            assert np.array_equal(first_row(engine, prompt), fresh_row), f"after {name}: the last row differs from a fresh read's"
            fill()
            assert run(engine.plain, prompt, GenerationConfig(max_tokens=ANSWER_TOKENS)).tokens == fresh, f"after {name}"

        short = prompt[:40]  # shorter than a pass: read whole, whatever the cache holds
        model.clear_cache()
        short_row = first_row(engine, short)
        assert np.array_equal(first_row(engine, short), short_row)
        first_row(engine, prompt)
        assert np.array_equal(first_row(engine, short), short_row)


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_temperature_0_through_the_server_is_generate_no_draft_fresh_cached_and_partly_cached(real_models, tmp_path, parallel):
    """Issue 46: the same request answered one way on a fresh server and another once its prompt was cached."""
    target, _ = real_models
    reference = cli("generate", "--target", str(target), "--no-draft", "--raw", "--prompt", TEXT, "--max-tokens", str(ANSWER_TOKENS),
                    "--json")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)["text"]
    with live_server(tmp_path, "--target", str(target), "--drafter", "none", "--parallel", parallel, "--ctx-size", "4096") as server:
        def complete(prompt: str, **extra: object) -> dict:
            status, body = server.request("POST", "/completion", {"prompt": prompt, "n_predict": ANSWER_TOKENS, "temperature": 0,
                                                                  **extra})
            assert status == 200, body
            return body

        fresh = complete(TEXT)
        assert fresh["timings"]["cache_n"] == 0 and fresh["content"] == expected
        cached = complete(TEXT)
        assert cached["timings"]["cache_n"] > 100 and cached["content"] == expected
        complete(TEXT[: len(TEXT) // 2] + OTHER_TAIL)  # the cache now holds half of the prompt and another tail
        partly = complete(TEXT)
        assert 0 < partly["timings"]["cache_n"] < cached["timings"]["cache_n"] and partly["content"] == expected
        status, events = server.request("POST", "/v1/completions", {"prompt": TEXT, "max_tokens": ANSWER_TOKENS, "temperature": 0,
                                                                   "stream": True})
        assert status == 200
        chunks = [json.loads(line[len("data: "):]) for line in events.splitlines() if line.startswith("data: {")]
        assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == expected
