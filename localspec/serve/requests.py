"""The request bodies clients send, read leniently: unknown fields are ignored, never refused.

Booleans are strict (StrictBool): `"stream": "yes"` is a 400 naming the field, not read as true.

llama.cpp takes some options as flat dotted keys ("speculative.n_max": 0) and
clients also send them nested ({"speculative": {"n_max": 0}}); `option` reads
either.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from localspec.errors import UsageError

# The roles a chat template knows; OpenAI's "developer" is its newer name for "system" (templates know only the latter).
ROLES = ("system", "user", "assistant", "tool")
ROLE_ALIASES = {"developer": "system"}


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
    stream: StrictBool = False
    response_format: Any = None  # OpenAI's; checked by session/structured_output.py, which says what is wrong
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

    @field_validator("content")
    @classmethod
    def _text_only(cls, content: str | list[TextPart] | None) -> str | list[TextPart] | None:
        for part in content if isinstance(content, list) else []:
            if part.type != "text":  # an image or a sound dropped in silence would be answered as if never sent
                raise ValueError(f"a {part.type!r} part cannot be read: this server runs a text-only model; send text parts only")
        return content

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        role = ROLE_ALIASES.get(role, role)
        if role not in ROLES:  # a template given a role it does not know renders it wrong, or as the user's words
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)} (or developer, read as system)")
        return role

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
    include_usage: StrictBool = False


def answer_limit(**given: int | None) -> int | None:
    """The one length limit an OpenAI request gives (the first of `given` that is set): below 1 it is refused, 0 and -5
    alike, as OpenAI refuses them and as the command line refuses --max-tokens 0 (a negative one ran until the end)."""
    for name, value in given.items():
        if value is not None:
            if value < 1:
                raise UsageError(f"{name} = {value}: it must be 1 or more. Leave it out to let the answer run until it ends.")
            return value
    return None


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: StrictBool | None = None  # None: true, OpenAI's default


class CompletionRequest(SamplingFields):
    """OpenAI's /v1/completions; with `suffix` the server builds the model's fill-in-the-middle prompt."""

    prompt: str | list[str] | list[int] = ""
    suffix: str | None = None
    max_tokens: int | None = None
    n_predict: int | None = None  # llama.cpp's name for max_tokens, which its server reads here too
    stream_options: StreamOptions | None = None
    echo: StrictBool = False  # the prompt's text before the answer's


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
    add_special: StrictBool = False
    with_pieces: StrictBool = False


class DetokenizeRequest(Lenient):
    tokens: list[int]
