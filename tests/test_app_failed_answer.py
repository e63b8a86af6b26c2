"""An answer that fails is kept as failed, with its reason, across a restart. The real app, driven by Pilot, on real
llama.cpp with tiny generated models."""

from __future__ import annotations

from localspec.session.history import History
from tests.app_pilot import Setup, answers, local_pair, run_async, wait_for

REASON = "needs a draft with the target's tokenizer"


@run_async
async def test_an_answer_that_fails_before_its_first_token_reads_failed_after_a_restart(setup: Setup, tiny):
    """Issue 75: an answer that failed read "Assistant · failed" while the app ran, and "interrupted (the app closed
    mid-answer)" after a clean Ctrl+Q and a restart: it failed before generation began (here: settings that ask the
    model drafter of a pair whose draft has another tokenizer), where the row was never closed, so the next start took
    it for one a crash had cut."""
    setup.write(local_pair("two-tokenizers", tiny["target"], tiny["other_vocab"]), last_pair="two-tokenizers", max_tokens=8, drafter="model")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        app.query_one("#prompt").focus()
        await pilot.press(*"hello there", "enter")
        await wait_for(pilot, lambda: answers(app) and app.streaming is None)
        (view,) = answers(app)
        assert view.status == "error" and REASON in view._header()
        await pilot.press("ctrl+q")
    history = History(setup.history)
    (stored,) = [m for m in history.messages(history.conversations()[0].id) if m.role == "assistant"]
    history.close()
    assert stored.status == "error" and stored.error is not None and REASON in stored.error

    restarted = setup.app()
    async with restarted.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: bool(answers(restarted)))
        (view,) = answers(restarted)
        header = view._header()
        assert view.status == "error" and "failed: " in header and REASON in header and "interrupted" not in header
        await pilot.press("ctrl+q")
