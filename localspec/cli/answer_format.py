"""What `generate` holds its answer to: `--json-schema` (a file, or the schema inline) or `--grammar` (a GBNF file).

Read and checked before anything loads, so a typo costs a second: each fault is a UsageError that names the option
and what is wrong. The grammar's state is made after the load, on the target's vocabulary (`grammar_for`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from localspec.engine.errors import EngineError
from localspec.engine.grammar import Grammar, GrammarText, definition_problem, gbnf_grammar, json_grammar
from localspec.engine.llama.model import Model
from localspec.errors import UsageError


@dataclass(frozen=True)
class AnswerFormat:
    text: GrammarText
    given: str  # the option as the user gave it, for messages: "--grammar answer.gbnf", "--json-schema (inline)"

    def grammar_for(self, target: Model) -> Grammar:
        """The answer's grammar state over the target's vocabulary; a grammar neither llguidance nor llama.cpp can read is
        the command line's fault."""
        try:
            return target.grammar(self.text)
        except EngineError as exc:
            refused = f" (llguidance refused it too: {self.text.why})" if self.text.why else ""
            raise UsageError(f"{self.given}: {exc}{refused}") from None


def answer_format(json_schema: str | None, grammar: Path | None) -> AnswerFormat | None:
    """The format asked for (argparse lets at most one of the two through), or None: free text."""
    if json_schema is not None:
        given, schema = _schema(json_schema)
        try:
            text = json_grammar(schema)
        except EngineError as exc:
            raise UsageError(f"{given}: {exc}") from None
    elif grammar is not None:
        given, text = f"--grammar {grammar}", gbnf_grammar(_read(f"--grammar {grammar}", grammar))
    else:
        return None
    if problem := definition_problem(text):
        raise UsageError(f"{given}: the grammar cannot be used: {problem.strip()}")
    return AnswerFormat(text, given)


def _schema(value: str) -> tuple[str, dict]:
    """A schema given inline (the value begins with "{") or in a file."""
    inline = value.lstrip().startswith("{")
    given = "--json-schema (inline)" if inline else f"--json-schema {value}"
    if not inline and not Path(value).is_file():
        raise UsageError(f"{given}: there is no such file, and it is not a schema given inline (a JSON object, {{...}}).")
    source = value if inline else _read(given, Path(value))
    try:
        schema = json.loads(source)
    except ValueError as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UsageError(f"{given}: this is not JSON ({getattr(exc, 'msg', exc)}{where}).") from None
    if not isinstance(schema, dict):
        raise UsageError(f"{given}: a JSON schema is an object ({{\"type\": ...}}), not {_json_kind(schema)}.")
    return given, schema


def _json_kind(value: object) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number"


def _read(given: str, path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it is not UTF-8 text"
        raise UsageError(f"{given}: the file cannot be read ({reason}).") from None
    if not text.strip():
        raise UsageError(f"{given}: the file is empty.")
    return text
