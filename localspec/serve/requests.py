"""The request bodies clients send, read leniently: unknown fields are ignored, never refused.

llama.cpp takes some options as flat dotted keys ("speculative.n_max": 0) and
clients also send them nested ({"speculative": {"n_max": 0}}); `option` reads
either.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")

    def option(self, dotted: str) -> Any:
        """A dotted option (`speculative.n_max`, `localspec.drafter`), flat or nested; None when absent."""
        extra = self.model_extra or {}
        if dotted in extra:
            return extra[dotted]
        head, _, tail = dotted.partition(".")
        nested = extra.get(head)
        return nested.get(tail) if isinstance(nested, dict) else None


class SamplingFields(Lenient):
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    response_format: Any = None  # OpenAI's; checked by serve/response_format.py, which says what is wrong
    json_schema: Any = None  # llama-server's
    grammar: Any = None  # llama-server's GBNF

    @property
    def stop_strings(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return tuple(s for s in stops if s)


class TextPart(Lenient):
    type: str = "text"
    text: str = ""


class ChatMessage(Lenient):
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        """What a chat template reads: text parts joined, tool calls with their arguments as objects (as templates expect)."""
        content = self.content if isinstance(self.content, str) or self.content is None else "".join(p.text for p in self.content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.tool_calls:
            out["tool_calls"] = [_call_for_template(call) for call in self.tool_calls]
        for key in ("tool_call_id", "name"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def _call_for_template(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    if isinstance(function.get("arguments"), str):
        try:
            function["arguments"] = json.loads(function["arguments"])
        except ValueError:
            pass
    return {**call, "function": function}


class StreamOptions(Lenient):
    include_usage: bool = False


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None


class CompletionRequest(SamplingFields):
    """OpenAI's /v1/completions; with `suffix` the server builds the model's fill-in-the-middle prompt."""

    prompt: str | list[str] | list[int] = ""
    suffix: str | None = None
    max_tokens: int | None = None
    n_predict: int | None = None  # llama.cpp's name for max_tokens, which its server reads here too
    stream_options: StreamOptions | None = None


class NativeCompletionRequest(SamplingFields):
    """llama.cpp's /completion."""

    prompt: str | list[int] | list[str] = ""
    n_predict: int = -1
    response_fields: list[str] = Field(default_factory=list)  # llama.cpp's: only these ("timings/prompt_n"), as flat keys


class ExtraChunk(Lenient):
    filename: str = ""
    text: str = ""


class InfillRequest(SamplingFields):
    """llama.cpp's /infill, as llama.vim and llama.vscode call it."""

    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: str = ""
    n_predict: int = -1
    response_fields: list[str] = Field(default_factory=list)
    n_indent: int = 0
    t_max_predict_ms: int = 0


class TokenizeRequest(Lenient):
    content: str
    add_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(Lenient):
    tokens: list[int]
