"""What an answer may say (JSON mode, a JSON schema, a tool call, a GBNF grammar), as the constrained target sees it.

The constrained target is the target whose every row has the tokens the grammar forbids there set to -inf. A verify
pass's row i is masked with the grammar as it stands after the draft's first i tokens, so verification judges the
draft against the constrained target exactly as it judges any draft: greedy takes the masked argmax, speculative
sampling's p is the masked softmax, and a draft token the grammar forbids has p = 0 and is always rejected. Rows past
such a token, or past the grammar's end, are never used (the draft or the answer ends there), so they are left as
they are. Only what the verdict emits enters
the grammar's state.

Where the grammar admits one continuation (a tool call's `{"name": "get_weather", "arguments": {"city": "`, a strict
schema's keys), `forced` gives it as the target's tokenizer writes it: the decode loop drafts it for free, and the
verification judges it as any draft, so it is lossless by construction (the masked target nearly always keeps it; where
it would spell the text with other tokens, the draft ends there).

The masks come from llguidance (the structured-generation library llama.cpp's optional build, vLLM and SGLang use): a
token trie over the vocabulary computes a row's mask in tens of microseconds, where llama.cpp's grammar sampler ran
over all 152k candidates through ctypes (14-16 ms a row). A GBNF grammar llguidance cannot read runs on llama.cpp's
own sampler instead (engine/llama/gbnf_sampler.py): slower, never wrong, and it forces nothing.
"""

from __future__ import annotations

import ctypes
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import llama_cpp
import llguidance
import llguidance.llamacpp
import numpy as np
from llguidance.gbnf_to_lark import any_to_lark

from localspec.engine.errors import EngineError

ANY_OBJECT: dict = {"type": "object"}  # OpenAI's json_object: any JSON object


@dataclass(frozen=True)
class GrammarText:
    """A grammar in the form its engine reads: llguidance's definition, or GBNF for llama.cpp's sampler where llguidance
    cannot read it (`why` says what it refused)."""

    llguidance: str | None = None
    gbnf: str | None = None
    why: str = ""


# JSON as models write it on one line, `{"city": "Paris", "days": 3}`: with one spelling of the separators and no free
# whitespace, the keys, quotes, colons and braces of a strict schema are forced text, drafted for free.
JSON_LAYOUT = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False, "lenient": True}


def json_grammar(schema: dict | None) -> GrammarText:
    """Values of a JSON schema; None: any JSON object (OpenAI's json_object). An object that does not say whether it takes
    properties besides those it names takes none, as llama.cpp's schema converter and OpenAI's strict mode have it."""
    try:
        schema = closed(ANY_OBJECT if schema is None else schema)
        return GrammarText(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_LAYOUT))  # type: ignore[arg-type]
    except ValueError as exc:
        raise EngineError(f"This JSON schema cannot be turned into a grammar: {exc}.") from exc


SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")  # keywords whose value maps names to schemas


def closed(schema: Any) -> Any:
    """The schema with `"additionalProperties": false` on every object schema that names its properties and says
    nothing of others (a copy: the request's own is left as it is)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: ({name: closed(value) for name, value in value.items()} if key in SCHEMA_MAPS and isinstance(value, dict)
                 else closed(value)) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def gbnf_grammar(gbnf: str) -> GrammarText:
    """A GBNF grammar (llama.cpp's format, a rule named root): llguidance's where it reads it, else llama.cpp's sampler's."""
    try:
        return GrammarText(llguidance.LLMatcher.grammar_from_lark(any_to_lark(gbnf)))
    except Exception as exc:  # the converter raises what it meets on GBNF it does not know
        return GrammarText(gbnf=gbnf, why=f"{type(exc).__name__}: {exc}")


def definition_problem(text: GrammarText) -> str:
    """What llguidance finds wrong in a definition before any vocabulary is read (a schema's pattern that is no regular
    expression), '' where nothing: a command line says so before a model loads. A GBNF grammar left to llama.cpp's
    sampler is parsed only against a model's vocabulary."""
    return llguidance.LLMatcher.validate_grammar(text.llguidance) if text.llguidance is not None else ""


class Grammar(Protocol):
    """One answer's grammar state, which the verification and the decode loop share."""

    ns: int  # time spent masking rows, finding forced text and following the answer (the statistics report it)
    rows: int  # rows masked

    def mask(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """The verify rows as the constrained target has them: row i under the grammar after draft[:i]."""
        ...

    def forced(self, limit: int) -> list[int]:
        """Up to `limit` tokens the grammar fixes next, as the target's tokenizer writes them (none where it admits two
        continuations)."""
        ...

    def accept(self, tokens: Sequence[int]) -> None:
        """What the verdict emitted (each allowed by construction) enters the grammar's state."""
        ...

    def close(self) -> None: ...


def tokenizer(vocab: ctypes.c_void_p, n_vocab: int) -> llguidance.LLTokenizer:
    """llguidance's view of a GGUF vocabulary, every end-of-generation token an end (about a second on 152k tokens: a
    model keeps it)."""
    ends = [token for token in range(llama_cpp.llama_vocab_n_tokens(vocab)) if llama_cpp.llama_vocab_is_eog(vocab, token)]
    with warnings.catch_warnings():  # it asks each token's attributes by the binding's deprecated name, a warning a token
        warnings.simplefilter("ignore", DeprecationWarning)
        return llguidance.llamacpp.lltokenizer_from_vocab(vocab, n_vocab=n_vocab, eos_token=ends)  # type: ignore[arg-type]


class LLGuidanceGrammar:
    """An answer's llguidance matcher: a row's mask is a bitmask filled in place, a draft is followed on a copy."""

    def __init__(self, lltokenizer: llguidance.LLTokenizer, definition: str, n_vocab: int,
                 limits: llguidance.LLParserLimits | None = None) -> None:
        """`limits`: llguidance's parser limits (its defaults unless a test lowers them to reach one)."""
        self._matcher = llguidance.LLMatcher(lltokenizer, definition, log_level=0, limits=limits)
        if self._matcher.is_error():
            raise EngineError(f"The grammar cannot be used: {self._matcher.get_error()}")
        self._emitted = 0  # tokens the answer emitted (an error names where)
        self._n_vocab = n_vocab
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._forbidden_bits = np.zeros_like(self._bits)
        self.ns = 0
        self.rows = 0

    def _constrain(self, matcher: llguidance.LLMatcher, row: np.ndarray) -> np.ndarray:
        """Set what `matcher` forbids next to -inf in `row`, in place: which tokens it allows (a bitmask llguidance fills
        in microseconds; inverted, unpacked and applied with numpy in about a tenth of a millisecond a 152k row)."""
        matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        np.invert(self._bits, out=self._forbidden_bits)
        forbidden = np.unpackbits(self._forbidden_bits.view(np.uint8), bitorder="little")[: self._n_vocab].view(bool)
        np.copyto(row, np.float32(-np.inf), where=forbidden)
        return forbidden

    def mask(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """The draft is followed on a copy of the answer's matcher, never rolled back in it: after a rollback out of one
        branch of an anyOf, llguidance 1.9's masks still allowed the other branch's tokens, which its parser then refused
        (a served tool call's `",` after get_weather's only argument, "Flags: had_rollback"). An error (a parser limit) is
        kept by a matcher once reached, so it stays in the copy."""
        start = time.perf_counter_ns()
        masked = np.empty_like(rows, dtype=np.float32)
        try:
            follower = self._matcher.deep_copy() if draft else self._matcher
            for i in range(len(masked)):
                masked[i] = rows[i]
                forbidden = self._constrain(follower, masked[i])
                self.rows += 1
                if follower.is_error():  # a parser limit (ParserTooComplex) at the state after draft[:i]
                    if not i:
                        raise EngineError(f"The grammar is too complex to follow after {self._emitted} tokens "
                                          f"({follower.get_error()}). Simplify the schema or grammar.")
                    masked[i - 1, draft[i - 1]] = -np.inf  # the constrained target cannot go there either: the draft ends
                    masked[i:] = rows[i:]
                    break
                if i == len(draft) or forbidden[draft[i]] or follower.is_stopped():
                    # The draft ends here, or the grammar forbids its next token, or the grammar is complete and allows
                    # only an end of generation, which ends the answer: later rows are never used (copied as they are).
                    masked[i + 1 :] = rows[i + 1 :]
                    break
                if not follower.consume_token(draft[i]):  # a parser limit on the way: as above, the draft ends before it
                    masked[i, draft[i]] = -np.inf
                    masked[i + 1 :] = rows[i + 1 :]
                    break
        finally:
            self.ns += time.perf_counter_ns() - start
        return masked

    def forced(self, limit: int) -> list[int]:
        if limit <= 0:
            return []
        start = time.perf_counter_ns()
        tokens = self._matcher.compute_ff_tokens()[:limit]
        self.ns += time.perf_counter_ns() - start
        return list(tokens)

    def accept(self, tokens: Sequence[int]) -> None:
        start = time.perf_counter_ns()
        for token in tokens:
            if self._matcher.is_stopped():
                break  # the grammar is complete: what follows is an end of generation, which ends the answer anyway
            if not self._matcher.consume_token(token):
                raise EngineError(f"The answer left its grammar: {self._matcher.get_error()}")
            self._emitted += 1
        self.ns += time.perf_counter_ns() - start

    def close(self) -> None:
        """Nothing to free by hand: the matcher is Python's."""

