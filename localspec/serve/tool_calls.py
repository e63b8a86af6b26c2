"""Tool calls in a model's output, for the formats of the catalog's families.

- Qwen2.5 / Qwen3 (Hermes style): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, with any
  text around them as the message's content;
- Llama 3.x: the whole answer is the call, `{"name": ..., "parameters": {...}}` (optionally after
  `<|python_tag|>`; several calls separated by `;`).

Small models often write that JSON inside a ```json fence instead (Qwen2.5-Coder 1.5B does): a whole answer
that is one fenced call to an offered tool counts as the call. A JSON object naming no offered tool stays text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from localspec.errors import UsageError
from localspec.serve.text_streams import TagSplitter

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
JSON_FENCE = "```json"
BARE_OPENINGS = ("{", PYTHON_TAG, JSON_FENCE)  # answers that may be one bare call: held whole until the end


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_dict(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def parse_call(text: str) -> ToolCall | None:
    """One call from its JSON; None when the text is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    return ToolCall(data["name"], arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))


def parse_json_calls(text: str, names: frozenset[str] | None = None) -> list[ToolCall] | None:
    """Llama 3.x's format (or a fenced JSON call): the whole text is one call, or several separated by ';';
    None when it is not, or when a call names no tool in `names` (None: any name)."""
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    if body.startswith(JSON_FENCE) and body.endswith("```"):
        body = body.removeprefix(JSON_FENCE).removesuffix("```").strip()
    if not body.startswith("{"):
        return None
    calls = [parse_call(part) for part in body.split(";") if part.strip()] if ";" in body else [parse_call(body)]
    if not calls or not all(calls) or (names is not None and any(call.name not in names for call in calls)):  # type: ignore[union-attr]
        return None
    return calls  # type: ignore[return-value]


def parse_tool_calls(text: str, names: frozenset[str] | None = None) -> tuple[str, list[ToolCall]]:
    """The content without the calls, and the calls, from a finished answer."""
    json_calls = parse_json_calls(text, names)
    if json_calls is not None:
        return "", json_calls
    stream = ToolCallStream(names)
    events = stream.feed(text) + stream.end()
    content = "".join(value for kind, value in events if kind == "content")
    return content, [value for kind, value in events if kind == "call"]


class ToolCallStream:
    """Content streams on as it comes; a call is held until it is complete, then emitted whole.

    An answer that opens with `{` (or `<|python_tag|>`) may be a Llama-style call: it is held to the end.
    """

    def __init__(self, names: frozenset[str] | None = None) -> None:
        self._names = names
        self._tags = TagSplitter(HERMES_OPEN, HERMES_CLOSE)
        self._call = ""
        self._start = ""  # the answer's opening, until it shows whether it is a bare JSON call
        self._bare: bool | None = None

    def feed(self, text: str) -> list[tuple[str, Any]]:
        if self._bare is None:
            self._start += text
            opening = self._start.lstrip()
            if not opening or any(len(opening) < len(tag) and tag.startswith(opening) for tag in BARE_OPENINGS):
                return []  # nothing yet, or what could still become a bare call's opening
            self._bare = opening.startswith(BARE_OPENINGS)
            if self._bare:
                return []
            text, self._start = self._start, ""
        if self._bare:
            self._start += text
            return []
        return self._route(self._tags.feed(text))

    def _route(self, pieces: list[tuple[str, str]]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for part, value in pieces:
            if part == "outer" and value:
                out.append(("content", value))
            elif part == "inner":
                self._call += value
            elif part == "leave":
                call = parse_call(self._call.strip())
                call = call if call is None or self._names is None or call.name in self._names else None
                out.append(("call", call) if call else ("content", HERMES_OPEN + self._call + HERMES_CLOSE))
                self._call = ""
        return out

    def end(self) -> list[tuple[str, Any]]:
        if self._bare or (self._bare is None and self._start):
            calls = parse_json_calls(self._start, self._names)
            return [("call", call) for call in calls] if calls else [("content", self._start)]
        out = self._route(self._tags.end())
        if self._call:  # a call the answer never closed (cut by max tokens): shown as the text it is
            out.append(("content", HERMES_OPEN + self._call))
        return out


def forced_call_schema(tools: list[dict[str, Any]], tool_choice: Any) -> dict[str, Any] | None:
    """The JSON schema a call must follow where `tool_choice` forces one ("required": any offered tool; a named function:
    that one); None where the model may answer in text ("auto", or no choice). The answer is then held to the schema by
    the grammar the server uses for JSON schemas, and is the call itself."""
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
    return calls[0] if len(calls) == 1 else {"anyOf": calls}
