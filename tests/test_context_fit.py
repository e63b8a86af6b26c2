"""A conversation that outgrows the context keeps going: the oldest turns leave the prompt, and a cut answer is stored as cut."""

from __future__ import annotations

import threading

from localspec.catalog.models_toml import parse_catalog
from localspec.engine.chat import Message, render_chat
from localspec.engine.events import StopReason
from localspec.session.chat import load_pair, stream_answer
from localspec.session.context_fit import fit_conversation
from localspec.session.history import History
from localspec.session.settings import Settings
from tests.app_pilot import local_pair


def long_conversation(turns: int) -> list[Message]:
    messages = [Message("system", "You are terse.")]
    for i in range(turns):
        messages += [Message("user", f"question {i}: " + "tell me everything " * 8), Message("assistant", f"answer {i}: " + "words " * 20)]
    return messages + [Message("user", "and the last question")]


def test_the_oldest_turns_leave_the_prompt_and_the_newest_gets_an_answer(tiny, tmp_path):
    pair = parse_catalog(local_pair("tiny", tiny["talkative"], tiny["talkative_draft"]), "test", require_default=False).get("tiny")
    settings = Settings(n_ctx=256, max_tokens=1000, drafter="model")
    loaded = load_pair(pair, tiny["talkative"], tiny["talkative_draft"], settings, lambda _stage: None, threading.Event())
    try:
        target = loaded.engine.target
        messages = long_conversation(12)
        fitted = fit_conversation(target, messages, room=128)
        assert fitted.dropped_messages > 0 and fitted.dropped_messages % 2 == 0  # whole turns: a question with its answer
        kept = messages[:1] + messages[1 + fitted.dropped_messages :]
        assert fitted.tokens == target.vocab.tokenize(render_chat(target, kept), add_special=False)
        assert len(fitted.tokens) + 128 <= target.n_ctx and kept[1].role == "user" and kept[-1].content == "and the last question"

        history = History(tmp_path / "h.sqlite3")
        conversation = history.create()
        message_id = history.start_answer(conversation.id, "tiny", {})
        # Once this raised "The prompt is ... tokens but the context holds 256" and the chat was stuck.
        result = stream_answer(loaded, messages, settings, history, message_id, threading.Event(), lambda _update: None)
        assert result.dropped_messages == fitted.dropped_messages
        assert result.finished.reason is StopReason.CONTEXT_FULL and result.text  # the talkative target runs into the end
        stored = history.messages(conversation.id)[-1]
        assert (stored.status, result.status) == ("cut", "cut") and stored.content == result.text
    finally:
        loaded.close()


def test_a_conversation_that_fits_is_left_whole(tiny):
    from localspec.engine.llama.model import Model

    with Model(tiny["target"]) as target:
        messages = long_conversation(2)
        assert fit_conversation(target, messages, room=512).dropped_messages == 0
