"""How the app starts: on a damaged history, on settings that lost the last pair, and on a pair or files named on the
command line. The real app, driven by Pilot, on real llama.cpp with tiny generated models."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.hub.config import HubConfig
from localspec.session.history import History
from tests.test_app import Setup, ask, local_pair, run_async, wait_for


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path, HubConfig("http://127.0.0.1:9", tmp_path / "hf", offline=False, token=False))


def damage_pages(path: Path) -> None:
    """Bytes 100-8191 overwritten, as issue 75 found: SQLite's header stays whole, so the file opens, and the pages behind it
    (the schema's, the first tables') are garbage."""
    data = bytearray(path.read_bytes())
    data[100:8192] = b"A" * (8192 - 100)
    path.write_bytes(bytes(data))


@run_async
async def test_a_history_with_damaged_pages_is_kept_and_the_app_starts_in_memory(setup: Setup, tiny):
    """Issue 75: the app exited 1 at start, "The chat history failed even in memory (database disk image is malformed)"."""
    history = History(setup.history)
    for n in range(20):  # several pages of chats, the file's first two among them
        conversation = history.create(f"chat {n}")
        history.add_user_message(conversation.id, f"words of chat {n} " * 50)
    history.close()
    damage_pages(setup.history)
    damaged = setup.history.read_bytes()
    setup.write(local_pair("tiny", tiny["target"], tiny["same"]), last_pair="tiny", max_tokens=8)
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: any("cannot be opened" in n.message for n in app._notifications))
        said = next(n.message for n in app._notifications if "cannot be opened" in n.message)
        assert "database disk image is malformed" in said and "move it aside" in said and "kept in memory only" in said
        view = await ask(pilot, app, "hello there")  # the session goes on, in memory
        assert view.text and view.status == "max_tokens"
    assert setup.history.read_bytes() == damaged  # never written over, never deleted


def answered_with(history: History, pair_id: str) -> None:
    conversation = history.create(f"a chat with {pair_id}")
    history.add_user_message(conversation.id, "hello")
    answer = history.start_answer(conversation.id, pair_id, {})
    history.finish_answer(answer, "hi", "complete", {}, [])


@run_async
async def test_settings_that_are_not_json_lose_no_pair_the_history_or_the_disk_knows(setup: Setup, tiny):
    """Issue 75: a corrupted settings.json was kept as .bad, and the app then offered the 1.6 GB default download. The last
    pair comes from the history's last answer, else from a pair whose files are here."""
    missing = setup.root / "gone.gguf"
    catalog = (local_pair("gone", missing, missing) + local_pair("older", tiny["target"], tiny["same"])
               + local_pair("newer", tiny["target"], tiny["near"]))
    history = History(setup.history)
    answered_with(history, "older")
    answered_with(history, "newer")
    answered_with(history, "no-longer-in-the-catalog")
    history.close()
    setup.write(catalog)
    setup.settings.write_text('{"last_pair": "newer", ')  # cut short: not JSON
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert app.loaded is not None and app.loaded.pair.id == "newer"  # the last answer's pair that the catalog still has
        assert any("is not valid JSON" in n.message for n in app._notifications)
    assert setup.settings.with_suffix(".json.bad").read_text() == '{"last_pair": "newer", '

    setup.history.unlink()  # no history either: a pair whose files are here, not the default's download
    setup.settings.write_text("not json")
    app = setup.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        assert app.loaded is not None and app.loaded.pair.id == "older"  # "gone" comes first, but its files are not here
