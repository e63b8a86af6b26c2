"""A draft whose path runs past one of llguidance's parser limits ends there, and the answer's grammar goes on.

llguidance's matcher keeps an error through a rollback, so a limit reached while following a draft (ParserTooComplex)
once ended the answer that followed with "The answer left its grammar", on a path the answer never took.
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


def test_a_draft_past_a_parser_limit_ends_before_it_and_the_answer_goes_on(real_models):
    model = Model(real_models[1], ModelConfig(0, 512), role="draft")
    try:
        definition = json_grammar(SCHEMA).llguidance
        assert definition is not None
        lltokenizer = grammar.tokenizer(model.vocab.handle, model.n_vocab)
        draft = model.vocab.tokenize('{"name": "a very long name indeed"}', False, False)
        reach = _reach(lltokenizer, definition, draft, model.n_vocab)
        assert reach >= 2  # the answer takes a token before the draft's path reaches the limit

        state = LLGuidanceGrammar(lltokenizer, definition, model.n_vocab, LIMITS)
        masked = state.mask(np.zeros((len(draft) + 1, model.n_vocab), dtype=np.float32), draft)
        assert all(np.isfinite(masked[i, draft[i]]) for i in range(reach - 1))  # the draft holds up to the limit
        assert masked[reach - 1, draft[reach - 1]] == -np.inf  # the token that leads past it is forbidden
        other = next(int(t) for t in np.flatnonzero(np.isfinite(masked[reach - 1])) if t != draft[reach - 1])
        state.accept([*draft[: reach - 1], other])  # the target's choice there: the grammar goes on, no error kept
        assert state.forced(1) is not None
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
