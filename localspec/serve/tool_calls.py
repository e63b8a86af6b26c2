"""Tool calls in a model's output, for the formats of the catalog's families.

- Qwen2.5 / Qwen3 (Hermes style): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, with any
  text around them as the message's content;
- Llama 3.x: the whole answer is the call, `{"name": ..., "parameters": {...}}` (optionally after
  `<|python_tag|>`; several calls separated by `;`), or a JSON list of calls.

Small models often write that JSON inside a ```json fence instead (Qwen2.5-Coder 1.5B does: one call, a list, or
two objects a line apart; with text around the fence or not): a fenced block whose JSON is calls to offered tools
counts as those calls. JSON naming no offered tool stays text. Where the request allows one call only
(`parallel_tool_calls` false), a block holding several stays text too, and so does any call after the first: no
call is dropped in silence.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from localspec.serve.text_streams import TagSplitter

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
JSON_FENCE, FENCE_CLOSE = "```json", "```"
BARE_OPENINGS = ("{", "[{", PYTHON_TAG)  # answers that may be bare calls: held whole until the end


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_dict(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def _call_of(data: Any) -> ToolCall | None:
    """One call from its decoded JSON; None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    return ToolCall(data["name"], arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))


def parse_json_calls(text: str, names: frozenset[str] | None = None) -> list[ToolCall] | None:
    """The whole text as calls: one JSON call, a JSON list of them, or several calls one after another (Llama 3.x's `;`
    between them), the whole optionally in a ```json fence. None when it is not, or when a call names no tool in `names`
    (None: any name)."""
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    if body.startswith(JSON_FENCE) and body.endswith(FENCE_CLOSE) and len(body) >= len(JSON_FENCE) + len(FENCE_CLOSE):
        body = body[len(JSON_FENCE) : -len(FENCE_CLOSE)].strip()
    values = _json_values(body) if body.startswith(("{", "[")) else None
    if values is None:
        return None
    items = values[0] if len(values) == 1 and isinstance(values[0], list) else values
    calls = [_call_of(item) for item in items]
    if not calls or any(call is None or (names is not None and call.name not in names) for call in calls):
        return None
    return calls  # type: ignore[return-value]


def _json_values(text: str) -> list[Any] | None:
    """The JSON values `text` holds one after another: one, or several apart by white space, `;` (Llama 3.x's, each may
    follow `<|python_tag|>`) or `,` (Qwen2.5-Coder writes two objects in one fence, a line apart); None where anything
    else sits between them."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        values.append(value)
        rest = text[at:].lstrip()
        rest = rest.removeprefix(";").removeprefix(",").lstrip().removeprefix(PYTHON_TAG).lstrip()
        at = len(text) - len(rest)
    return values


def parse_tool_calls(text: str, names: frozenset[str] | None = None, parallel: bool = True) -> tuple[str, list[ToolCall]]:
    """The content without the calls, and the calls, from a finished answer."""
    stream = ToolCallStream(names, parallel)
    events = stream.feed(text) + stream.end()
    content = "".join(value for kind, value in events if kind == "content")
    return content, [value for kind, value in events if kind == "call"]


class ToolCallStream:
    """Content streams on as it comes; a call is held until it is complete, then emitted whole.

    An answer that opens with `{`, `[{` (or `<|python_tag|>`) may be a Llama-style call: it is held to the end. Elsewhere
    a `<tool_call>` block or a ```json fence is held until it closes, then emitted as the calls it holds, or as the text
    it is. `parallel` False: one call at most (see the module's docstring).
    """

    def __init__(self, names: frozenset[str] | None = None, parallel: bool = True) -> None:
        self._names = names
        self._parallel = parallel
        self._sent = 0  # calls emitted so far
        self._tags = TagSplitter(HERMES_OPEN, HERMES_CLOSE)
        self._fences = TagSplitter(JSON_FENCE, FENCE_CLOSE)
        self._call = ""  # inside <tool_call>
        self._fenced = ""  # inside ```json
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

    def _calls(self, text: str, wrapped: str) -> list[tuple[str, Any]]:
        """`text` as calls where it holds calls this request may get; else `wrapped` (the text as the model wrote it)."""
        calls = parse_json_calls(text, self._names)
        if calls is None or (not self._parallel and self._sent + len(calls) > 1):
            return [("content", wrapped)]
        self._sent += len(calls)
        return [("call", call) for call in calls]

    def _route(self, pieces: list[tuple[str, str]]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for part, value in pieces:
            if part == "outer" and value:
                out += self._fence(self._fences.feed(value))
            elif part == "inner":
                self._call += value
            elif part == "leave":
                out += self._calls(self._call, HERMES_OPEN + self._call + HERMES_CLOSE)
                self._call = ""
        return out

    def _fence(self, pieces: list[tuple[str, str]]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for part, value in pieces:
            if part == "outer" and value:
                out.append(("content", value))
            elif part == "inner":
                self._fenced += value
            elif part == "leave":
                out += self._calls(self._fenced, JSON_FENCE + self._fenced + FENCE_CLOSE)
                self._fenced = ""
        return out

    def end(self) -> list[tuple[str, Any]]:
        if self._bare or (self._bare is None and self._start):
            return self._calls(self._start, self._start)
        out = self._route(self._tags.end())
        if self._call:  # a block never closed: its calls where its JSON is whole (a stop at </tool_call>), else text
            out += self._calls(self._call, HERMES_OPEN + self._call)
        out += self._fence(self._fences.end())
        if self._fenced:  # likewise for a fence never closed
            out += self._calls(self._fenced, JSON_FENCE + self._fenced)
        return out

