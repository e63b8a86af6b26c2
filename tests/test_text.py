"""Token bytes become text without splitting a character, and stop strings are caught across tokens."""

from __future__ import annotations

from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.text import TextAssembler
from tests.conftest import run


def test_multibyte_character_split_across_tokens_is_emitted_whole():
    text = TextAssembler()
    euro = "€".encode()  # three bytes
    assert text.push(b"a" + euro[:1]) == "a"
    assert text.push(euro[1:2]) == ""
    assert text.push(euro[2:] + b"b") == "€b"


def test_stop_string_across_tokens_is_held_then_cut():
    text = TextAssembler(stop=["END"])
    assert text.push(b"hello E") == "hello "
    assert text.push(b"N") == ""
    assert text.push(b"D and more") == ""
    assert text.stopped


def test_held_text_that_is_not_a_stop_is_released():
    text = TextAssembler(stop=["END"])
    assert text.push(b"an E") == "an "
    assert text.push(b"gg") == "Egg"
    assert text.push(b" E") == " "
    assert text.flush() == "E"


def test_generated_text_is_the_utf8_decoding_of_the_token_bytes(tiny):
    """The tiny models emit raw bytes, invalid UTF-8 included: the streamed text must equal one decode of all bytes."""
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        prompt = raw_prompt_tokens(engine.target, "€ über naïve 日本")
        result = run(engine.speculative, prompt, GenerationConfig(max_tokens=80, draft_max=3))
        data = b"".join(engine.target.vocab.token_bytes(t) for t in result.tokens)
    assert result.text == data.decode("utf-8", errors="replace")
