"""The real app with its target on a ggml-rpc-server that is killed mid-answer; run in a process of its own.

Why a subprocess: attaching a server adds devices to the whole process's ggml, which no other test should see.
`python -m tests.app_rpc_fault ROOT TARGET DRAFT ENDPOINT SERVER_PID` drives the app with Pilot and prints one JSON
object of what it saw; tests/test_rpc.py asserts on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from textual.widgets import Input

from localspec.engine.decode import Decoder
from localspec.hub.config import HubConfig
from localspec.session.history import History
from localspec.session.settings import Settings, save_settings
from localspec.tui.app import LocalspecApp
from localspec.tui.settings_screen import SettingsScreen
from tests.app_pilot import answers, ask, local_pair, slowed_generate, wait_for


async def drive(root: Path, target: Path, draft: Path, endpoint: str, server_pid: int) -> dict:
    catalog, history_path, settings_path = root / "models.toml", root / "history.sqlite3", root / "settings.json"
    catalog.write_text(local_pair("tiny", target, draft))
    save_settings(Settings(last_pair="tiny", max_tokens=3000, drafter="none", rpc_servers=endpoint), settings_path)
    app = LocalspecApp(HubConfig("http://127.0.0.1:9", root / "hf", offline=False, token=False), history_path, settings_path, catalog)
    notes: list[str] = []
    notify = app.notify
    app.notify = lambda message, **kwargs: (notes.append(str(message)), notify(message, **kwargs))[1]  # type: ignore[method-assign]
    seen: dict = {}
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.loaded is not None)
        seen["target_on_gpu"] = app.loaded.layers[-1].on_gpu  # type: ignore[union-attr]
        await pilot.press(*"tell me everything", "enter")
        await wait_for(pilot, lambda: bool(answers(app)) and len(answers(app)[-1].text) > 20)
        os.kill(server_pid, signal.SIGKILL)
        await wait_for(pilot, lambda: app.streaming is None)
        view = answers(app)[-1]
        seen |= {"status": view.status, "shown": view.text, "notes": list(notes)}
        # still usable: the settings drop the server, the pair reloads here, and the next answer is whole
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        app.screen.query_one("#rpc_servers", Input).value = ""
        app.screen.query_one("#max_tokens", Input).value = "8"  # a short answer: the decoder is slowed after 40 tokens
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.loaded is not None and app.settings.rpc_servers is None)
        seen["reloaded_target_on_gpu"] = app.loaded.layers[-1].on_gpu  # type: ignore[union-attr]
        after = await ask(pilot, app, "hello")
        seen |= {"after_status": after.status, "after_text": after.text}
    history = History(history_path)
    seen["stored"] = [(m.status, m.content) for m in history.messages(history.conversations()[0].id) if m.role == "assistant"]
    return seen


if __name__ == "__main__":
    Decoder.generate = slowed_generate(40)  # type: ignore[method-assign]  # so the kill lands mid-answer
    root, target, draft, endpoint, pid = sys.argv[1:6]
    print(json.dumps(asyncio.run(drive(Path(root), Path(target), Path(draft), endpoint, int(pid)))))
