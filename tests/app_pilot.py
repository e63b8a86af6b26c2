"""Driving the real app with Textual's Pilot, shared by the app's test files: a test's catalog and settings, asking a
prompt, and waiting on the app."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

from localspec.engine.decode import Decoder
from localspec.hub.config import HubConfig
from localspec.session.settings import Settings, save_settings
from localspec.tui.app import LocalspecApp
from localspec.tui.message_view import MessageView


def local_pair(pair_id: str, target: Path, draft: Path) -> str:
    return f'[[pair]]\nid = "{pair_id}"\ntitle = "Pair {pair_id}"\n[pair.target]\npath = "{target}"\n[pair.draft]\npath = "{draft}"\n'


def run_async(test):  # type: ignore[no-untyped-def]
    """Run an async test on a fresh event loop, without a pytest plugin."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return asyncio.run(test(*args, **kwargs))

    return wrapper


class Setup:
    def __init__(self, root: Path, hub_config: HubConfig) -> None:
        self.root = root
        self.catalog = root / "models.toml"
        self.history = root / "history.sqlite3"
        self.settings = root / "settings.json"
        self.hub_config = hub_config

    def write(self, catalog_text: str, **settings: object) -> Setup:
        self.catalog.write_text(catalog_text)
        save_settings(Settings(**settings), self.settings)  # type: ignore[arg-type]
        return self

    def app(self) -> LocalspecApp:
        return LocalspecApp(self.hub_config, self.history, self.settings, self.catalog)


async def wait_for(pilot, predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


def answers(app: LocalspecApp) -> list[MessageView]:
    return [v for v in app.query(MessageView) if v.role == "assistant"]


async def ask(pilot, app: LocalspecApp, text: str) -> MessageView:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.loaded is not None)
    before = len(answers(app))
    app.query_one("#prompt").focus()
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: len(answers(app)) > before and app.streaming is None)
    return answers(app)[-1]


def slowed_generate(n_tokens: int, seconds_per_token: float = 0.02):  # type: ignore[no-untyped-def]
    """The real decoder's generate, slowed after `n_tokens` to one token per `seconds_per_token` until the user
    cancels: a key press (or a killed server) then always lands mid-answer, however fast the machine decodes (the
    tiny pair can otherwise finish thousands of tokens between two polls of the test)."""
    generate = Decoder.generate

    def slowed(self, prompt, config, cancel=None):  # type: ignore[no-untyped-def]
        for i, event in enumerate(generate(self, prompt, config, cancel)):
            if i >= n_tokens and cancel is not None:
                cancel.wait(seconds_per_token)
            yield event

    return slowed


def read_whole(widget) -> str:  # type: ignore[no-untyped-def]
    """The text a widget shows, after checking that none of it runs past the screen's edge (where it would be cut)."""
    assert widget.region.right <= widget.screen.region.right and widget.region.x >= 0, (widget, widget.region)
    return " ".join(" ".join(strip.text.split()) for strip in widget.render_lines(widget.region.reset_offset)).strip()
