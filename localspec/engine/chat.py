"""The chat prompt: the target GGUF's own template, rendered once, tokenized once.

Rendering goes through llama-cpp-python's Jinja2ChatFormatter (a sandboxed
Jinja environment aligned with Transformers' chat-template rules), so a
template behaves here exactly as it does in llama-cpp-python. The resulting
token ids feed both models: the pair check guarantees they mean the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jinja2
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.engine.errors import ChatTemplateError
from localspec.engine.llama.model import Model

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


def with_system(system: str | None, messages: Sequence[Message]) -> list[Message]:
    """The messages a template renders: the system prompt first where there is one (an empty one is left out)."""
    return ([Message("system", system)] if system else []) + list(messages)


def render_chat(model: Model, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt text for `messages` (and the tools offered, as the template renders them), ending where the assistant's
    answer begins."""
    return render_messages(model, message_dicts(messages), tools)


def message_dicts(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as chat templates (and a request's GenerationConfig.conversation) take them."""
    return [{"role": m.role, "content": m.content} for m in messages]


def supports_tools(model: Model) -> bool:
    """Whether the model's chat template renders tool definitions (it reads the `tools` variable)."""
    return "tools" in (model.chat_template() or "")


def render_messages(model: Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt text for OpenAI-shaped messages (tool calls and tool results included) and tool definitions."""
    template = model.chat_template()
    if not template:
        raise ChatTemplateError(
            f"{model.path.name} has no chat template (tokenizer.chat_template), so localspec cannot "
            "format a conversation for it. Use raw completion instead (`localspec generate --raw`)."
        )
    bos = model.vocab.token_text(model.vocab.bos) if model.vocab.bos >= 0 else ""
    eos = model.vocab.token_text(model.vocab.eos) if model.vocab.eos >= 0 else ""
    try:
        formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True)
        return formatter(messages=messages, tools=tools).prompt  # type: ignore[arg-type]
    except (jinja2.TemplateError, ValueError, TypeError) as exc:
        raise ChatTemplateError(
            f"The chat template of {model.path.name} failed to render: {exc}. "
            "Use raw completion instead (`localspec generate --raw`)."
        ) from exc


def chat_problem(model: Model) -> str:
    """Why a conversation cannot be formatted for `model` ('' where it can): a load says it, before the first message
    fails on it."""
    try:
        render_messages(model, [{"role": "user", "content": "hello"}])
    except ChatTemplateError as exc:
        return str(exc)
    return ""


def chat_prompt_tokens(model: Model, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
    """Tokenize the rendered chat with special tokens parsed; the template already placed BOS."""
    return model.vocab.tokenize(render_chat(model, messages, tools), add_special=False, parse_special=True)


def raw_prompt_tokens(model: Model, text: str) -> list[int]:
    """Plain completion: the text as is, with the BOS token the model asks for."""
    return model.vocab.tokenize(text, add_special=True, parse_special=False)
