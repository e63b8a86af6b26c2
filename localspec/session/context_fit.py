"""A conversation longer than the context: the oldest turns leave the prompt, so the newest turn still gets an answer.

The system prompt always stays; turns go oldest first, a user message with the
answers that followed it, until the prompt leaves room for an answer. What was
left out stays in the history: only this answer's prompt is shorter.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.llama.model import Model


@dataclass(frozen=True)
class FittedPrompt:
    tokens: list[int]
    dropped_messages: int  # the oldest messages left out (0: the whole conversation fits)
    messages: list[Message]  # those the prompt renders


def answer_room(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer: what was asked for (None: no limit), up to half the context (a long
    conversation still gets a turn)."""
    return min(max_tokens or n_ctx, n_ctx // 2)


def fit_conversation(model: Model, messages: list[Message], room: int) -> FittedPrompt:
    """The prompt for `messages`, leaving out the oldest turns until `room` tokens are free after it.

    The newest turn always stays: if it alone leaves less room, it goes as it is (the decoder refuses a
    prompt that fills the whole context, with a message that says so).
    """
    system = messages[:1] if messages and messages[0].role == "system" else []
    turns = messages[len(system):]
    dropped = 0
    while True:
        tokens = chat_prompt_tokens(model, system + turns)
        if len(tokens) + room <= model.n_ctx or len(turns) <= 1:
            return FittedPrompt(tokens, dropped, system + turns)
        cut = 1
        while cut < len(turns) - 1 and turns[cut].role != "user":  # a turn is a user message and the answers after it
            cut += 1
        turns = turns[cut:]
        dropped += cut
