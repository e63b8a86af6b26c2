"""An answer's text as a chat client wants it: reasoning apart from content, tool calls parsed out.

Reasoning models (Qwen3, the DeepSeek-R1 distills) write `<think>...</think>`
first; it goes out as `reasoning_content`. With tools in the request, tool calls
go out as `tool_calls`. Both work on a stream, piece by piece, and on a whole answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from localspec.serve.text_streams import TagSplitter
from localspec.serve.tool_calls import ToolCall, ToolCallStream, parse_json_calls

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass
class Delta:
    content: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)


class Shaper(Protocol):
    def feed(self, text: str) -> Delta: ...
    def end(self) -> Delta: ...


class ForcedCall:
    """An answer held to the calls' schema (tool_choice "required" or a named function): the whole answer is the call,
    or the list of calls, sent once it is complete; an answer cut before its JSON closed (max_tokens) goes out as content."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, text: str) -> Delta:
        self._text += text
        return Delta()

    def end(self) -> Delta:
        calls = parse_json_calls(self._text)
        return Delta(calls=calls) if calls else Delta(content=self._text)


class AnswerShaper:
    def __init__(self, reasoning: bool, thinking_open: bool, tools: frozenset[str] | None, parallel: bool = True) -> None:
        """`reasoning`: the template knows <think>; `thinking_open`: the prompt already opened it; `tools`: the offered
        tools' names (None: no tools, so no calls are looked for); `parallel`: several calls may be made."""
        self._think = TagSplitter(THINK_OPEN, THINK_CLOSE, inside=thinking_open) if reasoning else None
        self._tools = ToolCallStream(tools, parallel) if tools is not None else None

    def feed(self, text: str) -> Delta:
        pieces = self._think.feed(text) if self._think else [("outer", text)]
        return self._shape(pieces, final=False)

    def end(self) -> Delta:
        pieces = self._think.end() if self._think else []
        return self._shape(pieces, final=True)

    def _shape(self, pieces: list[tuple[str, str]], final: bool) -> Delta:
        delta = Delta()
        for part, text in pieces:
            if part == "inner":
                delta.reasoning += text
            elif part == "outer" and text:
                self._content(delta, self._tools.feed(text) if self._tools else [("content", text)])
        if final and self._tools:
            self._content(delta, self._tools.end())
        return delta

    @staticmethod
    def _content(delta: Delta, events: list[tuple[str, object]]) -> None:
        for kind, value in events:
            if kind == "call":
                delta.calls.append(value)  # type: ignore[arg-type]
            else:
                delta.content += str(value)
