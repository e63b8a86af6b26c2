"""The text a grammar forces (engine/grammar.py), and the lookup past it (drafters/ngram.py): what the decode loop drafts
for free ahead of a drafter's tokens, on the real target's vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.engine.drafters.ngram import PromptLookup
from localspec.engine.grammar import LLGuidanceGrammar, gbnf_grammar, json_grammar
from localspec.engine.llama.gbnf_sampler import GbnfGrammar
from localspec.engine.llama.model import Model, ModelConfig

CALL = {"type": "object", "properties": {"name": {"const": "get_weather"},
                                         "arguments": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                                                       "required": ["city", "days"]}},
        "required": ["name", "arguments"]}


def test_a_lookup_past_forced_text_is_the_lookup_of_the_text_with_it_and_leaves_the_lookup_as_it_was():
    text = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7, 8, 9, 3, 4, 1, 2]
    after = [5, 6]
    looked, twin, whole = PromptLookup(), PromptLookup(), PromptLookup()
    for lookup in (looked, twin):
        lookup.start(text[:6])
        lookup.advance(text[6:])
    whole.start(text[:6])
    whole.advance([*text[6:], *after])
    assert looked.lookup(4, after).tokens == whole.lookup(4).tokens == [7, 8, 9, 3]
    # the look past the forced text changed nothing: the lookup goes on as its twin, which never looked
    for step in ([5, 6, 7], [8, 9], [3, 4, 1]):
        assert looked.lookup(5).tokens == twin.lookup(5).tokens
        looked.advance(step)
        twin.advance(step)
    assert looked.lookup(5) == twin.lookup(5)


@pytest.fixture(scope="module")
def target(real_models) -> Model:
    model = Model(real_models[0], ModelConfig(n_ctx=256))
    yield model
    model.close()


def test_a_tool_calls_opening_is_forced_as_the_target_writes_it_and_masking_a_draft_keeps_the_grammars_state(target):
    grammar = target.grammar(json_grammar(CALL))
    assert isinstance(grammar, LLGuidanceGrammar)
    forced = grammar.forced(64)
    # up to the string's opening `"`, which the tokenizer may join to what follows (` "Oslo`): the model writes it
    assert target.vocab.text(forced) == '{"name": "get_weather", "arguments": {"city":'
    assert forced == target.vocab.tokenize(target.vocab.text(forced), add_special=False, parse_special=False)
    assert grammar.forced(3) == forced[:3]
    rows = np.zeros((len(forced) + 1, target.n_vocab), dtype=np.float32)
    masked = grammar.mask(rows, forced)
    for row, token in zip(masked, forced):  # each forced token is the one its row allows
        assert np.flatnonzero(np.isfinite(row)).tolist() == [token]
    opening = {target.vocab.text([token]) for token in np.flatnonzero(np.isfinite(masked[-1]))}
    assert {" ", ' "', ' "/'} <= opening and not any(text.startswith(("}", ",")) for text in opening)
    assert grammar.forced(64) == forced  # masking followed the draft and rolled it back
    grammar.accept(forced)
    assert grammar.forced(64) == []  # the string's opening is the model's to choose
    grammar.accept(target.vocab.tokenize(' "Oslo", "days": ', add_special=False, parse_special=False))
    assert grammar.rows == len(forced) + 1


def test_json_is_one_line_and_closed_so_a_strict_schemas_keys_are_forced(target):
    grammar = target.grammar(json_grammar({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                           "required": ["a", "b"]}))
    assert target.vocab.text(grammar.forced(64)) == '{"a":'  # the space may join the number (` 1`)
    grammar.accept(grammar.forced(64) + target.vocab.tokenize(" 1", add_special=False, parse_special=False))
    row = grammar.mask(np.zeros((1, target.n_vocab), dtype=np.float32), [])[0]
    allowed = {target.vocab.text([token]) for token in np.flatnonzero(np.isfinite(row))}
    assert "," in allowed and " " not in allowed and "}" not in allowed  # b is required; no free whitespace


def test_a_gbnf_grammar_llguidance_cannot_read_runs_on_llama_cpps_sampler(target):
    text = gbnf_grammar('root ::= <[1000]> "x"')  # a token by its id: llama.cpp's GBNF has it, llguidance's converter not
    assert text.llguidance is None and "Expected" in text.why
    grammar = target.grammar(text)
    assert isinstance(grammar, GbnfGrammar)
    row = grammar.mask(np.zeros((1, target.n_vocab), dtype=np.float32), [])[0]
    assert np.flatnonzero(np.isfinite(row)).tolist() == [1000]
    assert grammar.forced(8) == []  # it finds no forced text: nothing is drafted from it
    assert isinstance(target.grammar(gbnf_grammar('root ::= "yes" | "no"')), LLGuidanceGrammar)
