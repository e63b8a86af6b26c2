"""What a request says its answer must be: OpenAI's `response_format`, llama-server's `json_schema` and `grammar`."""

from __future__ import annotations

from typing import Any

from localspec.engine.grammar import GrammarText, gbnf_grammar, json_grammar
from localspec.errors import UsageError

FORMATS = "text, json_object or json_schema"


def requested_grammar(response_format: Any, json_schema: Any, grammar: Any) -> GrammarText | None:
    """The grammar the answer is held to, or None for free text; a UsageError names a malformed field, and an EngineError a
    schema the converter cannot turn into a grammar."""
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise UsageError("grammar must be a GBNF grammar as text (llama.cpp's format), with a rule named root.")
        return gbnf_grammar(grammar)
    if json_schema is not None:
        return json_grammar(_schema(json_schema, "json_schema"))
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or response_format.get("type") not in ("text", "json_object", "json_schema"):
        raise UsageError(f"response_format must be an object whose type is {FORMATS}, not {response_format!r}.")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":  # llama-server also takes a schema here
        schema = response_format.get("schema")
        return json_grammar(None if schema is None else _schema(schema, "response_format.schema"))
    inner = response_format.get("json_schema")
    if not isinstance(inner, dict) or "schema" not in inner:
        raise UsageError('response_format of type json_schema needs "json_schema": {"name": ..., "schema": {...}}.')
    return json_grammar(_schema(inner["schema"], "response_format.json_schema.schema"))


def _schema(value: Any, name: str) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON schema (an object), not {value!r}.")
    return value
