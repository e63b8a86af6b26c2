"""What a draft followed under a grammar leaves behind: nothing in the answer's own matcher, and no token judged on an
unmasked row.

The grammar follows a draft on a copy of the answer's llguidance matcher (engine/grammar.py): rolled back in the
answer's own, drafts once left it allowing a token its parser then refused ("The answer left its grammar").
"""

from __future__ import annotations

import llguidance
import numpy as np
import pytest

from localspec.engine import grammar
from localspec.engine.errors import EngineError
from localspec.engine.grammar import LLGuidanceGrammar, json_grammar
from localspec.engine.llama.model import Model, ModelConfig

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
LIMITS = llguidance.LLParserLimits(step_lexer_fuel=300)  # reached at the string value, a few tokens in


def _reach(lltokenizer: llguidance.LLTokenizer, definition: str, tokens: list[int], n_vocab: int) -> int:
    """How many of `tokens` a matcher under LIMITS follows before computing its next mask errors."""
    matcher = llguidance.LLMatcher(lltokenizer, definition, log_level=0, limits=LIMITS)
    bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
    for reach, token in enumerate(tokens):
        matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        if matcher.is_error():
            return reach
        assert matcher.consume_token(token)
    raise AssertionError("the limit is never reached on these tokens: lower it")


TOOL_CALL = {"anyOf": [  # a forced tool call's grammar, "required" between two tools (the served test's)
    {"type": "object", "properties": {"name": {"const": "create_event"}, "arguments": {
        "type": "object", "properties": {"title": {"type": "string"}, "location": {
            "type": "object", "properties": {"city": {"type": "string"}, "venue": {"type": "string"}},
            "required": ["city", "venue"], "additionalProperties": False}},
        "required": ["title", "location"], "additionalProperties": False}},
     "required": ["name", "arguments"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}},
     "required": ["name", "arguments"], "additionalProperties": False},
]}


def test_a_draft_down_one_branch_leaves_no_trace_when_the_answer_takes_the_other(real_models):
    """A draft followed down create_event's branch, then the answer taking get_weather's: `",` after the city (which would
    open create_event's venue) is forbidden. The served tool calls' failure of that kind ("The answer left its grammar",
    after drafts rolled back in the answer's own matcher) needed a longer history than this one to appear."""
    model = Model(real_models[1], ModelConfig(0, 512), role="draft")
    try:
        definition = json_grammar(TOOL_CALL).llguidance
        assert definition is not None
        state = LLGuidanceGrammar(grammar.tokenizer(model.vocab.handle, model.n_vocab), definition, model.n_vocab)
        tokenize = lambda text: model.vocab.tokenize(text, False, False)  # noqa: E731
        state.accept(tokenize('{"name": "'))
        draft = tokenize('create_event", "arguments": {"title": "Party", "location": {"city": "')
        state.mask(np.zeros((len(draft) + 1, model.n_vocab), dtype=np.float32), draft)  # the draft, none of it kept
        state.accept(tokenize('get_weather", "arguments": {"city": "Lisbon'))
        row = state.mask(np.zeros((1, model.n_vocab), dtype=np.float32), [])[0]
        quote_comma, = tokenize('",')
        assert row[quote_comma] == -np.inf and np.isfinite(row[tokenize('"}')[0]])
    finally:
        model.close()


def test_an_answer_past_a_parser_limit_is_a_clear_error_not_an_unconstrained_token(real_models):
    """Where even a fresh matcher cannot mask the answer's next row, no token is judged on a row the grammar did not mask."""
    model = Model(real_models[1], ModelConfig(0, 512), role="draft")
    try:
        definition = json_grammar(SCHEMA).llguidance
        assert definition is not None
        lltokenizer = grammar.tokenizer(model.vocab.handle, model.n_vocab)
        answer = model.vocab.tokenize('{"name": "a very long name indeed"}', False, False)
        reach = _reach(lltokenizer, definition, answer, model.n_vocab)
        state = LLGuidanceGrammar(lltokenizer, definition, model.n_vocab, LIMITS)
        state.accept(answer[:reach])
        with pytest.raises(EngineError, match=f"The grammar is too complex to follow after {reach} tokens"):
            state.mask(np.zeros((2, model.n_vocab), dtype=np.float32), answer[reach : reach + 1])
    finally:
        model.close()
