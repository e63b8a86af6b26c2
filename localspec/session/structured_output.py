"""What a request says its answer must be, read one way for every door that takes OpenAI-shaped requests: OpenAI's
`response_format`, llama-server's `json_schema` and `grammar`, and the tools of `tool_choice` that force a call.

The server reads its requests here, and the bench its structured prompts, so a bench prompt runs under the grammar the
same request sent to `serve` would get, and measures what an editor's request costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from localspec.engine.grammar import GrammarText, gbnf_grammar, json_grammar
from localspec.errors import UsageError

FORMATS = "text, json_object or json_schema"


def requested_grammar(response_format: Any, json_schema: Any = None, grammar: Any = None) -> GrammarText | None:
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


def offered_tools(tools: list[dict[str, Any]] | None, tool_choice: Any) -> list[dict[str, Any]] | None:
    """The tools the model is shown (its chat template renders them): none where the request offers none or its
    tool_choice is "none"; a UsageError where tool_choice asks for a call and there is no tool to call."""
    if tool_choice not in (None, "none", "auto") and not tools:
        raise UsageError(f"tool_choice {tool_choice!r} asks for a tool call, but the request offers no `tools`.")
    return tools if tools and tool_choice != "none" else None


@dataclass(frozen=True)
class ToolRequest:
    """A request's tools as the model sees them, and the schema its answer must follow where tool_choice forces a call."""

    offered: list[dict[str, Any]] | None
    forced_schema: dict[str, Any] | None  # None: the model may answer in text
    parallel: bool


def tool_request(tools: list[dict[str, Any]] | None, tool_choice: Any, parallel_tool_calls: bool | None,
                 answer_form_given: bool) -> ToolRequest:
    """The tools shown and the forced call's schema (`parallel_tool_calls` None: allowed, OpenAI's default); a forced call
    beside another form of answer (`answer_form_given`: response_format, json_schema or grammar) is a UsageError."""
    offered = offered_tools(tools, tool_choice)
    parallel = parallel_tool_calls is not False
    forced = forced_call_schema(offered, tool_choice, parallel) if offered else None
    if forced is not None and answer_form_given:
        raise UsageError("A forced tool call (tool_choice) already fixes the answer's form: leave out response_format, "
                         "json_schema and grammar.")
    return ToolRequest(offered, forced, parallel)


def forced_call_schema(tools: list[dict[str, Any]], tool_choice: Any, parallel: bool = True) -> dict[str, Any] | None:
    """The JSON schema the answer must follow where `tool_choice` forces a call ("required": any offered tool; a named
    function: that one); None where the model may answer in text ("auto", or no choice). With `parallel` the answer is a
    JSON list of one call or more (as llama.cpp's generic format has it), else one call. The answer is then held to the
    schema by the grammar the server uses for JSON schemas, and is the calls themselves."""
    if tool_choice is None or tool_choice == "auto":
        return None
    by_name = {str((tool.get("function") or {}).get("name", "")): tool.get("function") or {} for tool in tools}
    if tool_choice == "required":
        chosen = list(by_name)
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "function" and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
        if name not in by_name:
            raise UsageError(f"tool_choice names the function {name!r}, which `tools` does not offer ({', '.join(by_name)}).")
        chosen = [name]
    else:
        raise UsageError(f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": {{"name": ...}}}}, '
                         f"not {tool_choice!r}.")
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": by_name[name].get("parameters") or {"type": "object"}},
              "required": ["name", "arguments"]} for name in chosen]
    call = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "array", "items": call, "minItems": 1} if parallel else call
