"""What the app knows, in one place: the pair, the conversation, the settings, what runs, and how settings are kept.

LocalspecApp and its two mixins (PairControl, ConversationControl) all build on it, so each sees the same typed
attributes and the type checker can follow them. The screens see the app as an AppState (or a PairControl) too: they
cannot import LocalspecApp, which imports them, so what they ask of the app besides opening a pair (reloading the
catalog, starting or cancelling a download) is done here.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

from textual.app import App

from localspec import paths
from localspec.catalog.models_toml import Catalog, CatalogError, load_catalog, parse_catalog, shipped_catalog_text, user_catalog_path
from localspec.hub.config import HubConfig
from localspec.session.chat import LoadedPair
from localspec.session.history import History
from localspec.session.settings import Settings, SettingsError, save_settings
from localspec.tui import workers
from localspec.tui.draw_pacer import DrawPacer
from localspec.tui.message_view import MessageView


class AppState(App[None]):
    def __init__(self, hub_config: HubConfig | None = None, history_path: Path | None = None,
                 settings_path: Path | None = None, catalog_file: Path | None = None, open_pair: str | None = None,
                 notice: str | None = None) -> None:
        super().__init__()
        self.requested_pair = open_pair  # named on the command line: opened instead of the last pair used
        self.startup_notice = notice  # the command line's word for the user, said once the app is up
        self.hub_config = hub_config or HubConfig.from_env()
        self.history_path = history_path or paths.history_file()
        self.settings_path = settings_path
        self.catalog_file = catalog_file or user_catalog_path()
        self.settings = Settings()
        self.settings_unsaved = False  # the last save failed (said once, until a save works again)
        self.catalog: Catalog = parse_catalog(shipped_catalog_text(), "models.toml (shipped with localspec)")
        self.history: History  # opened on mount
        self.loaded: LoadedPair | None = None
        self.loading_pair: str | None = None
        self.load_cancel: threading.Event | None = None
        self.answer_cancel: threading.Event | None = None
        self.pacer = DrawPacer(1)
        self.streaming: MessageView | None = None
        self.conversation_id: int | None = None
        self.download_cancel: threading.Event | None = None
        self.downloading_pair: str | None = None
        self.wide = True  # the terminal was wide enough for the conversation list at the last resize

    def shown_conversation(self) -> int:
        """The conversation on screen: there is one from the app's mount on, when its keys start to work."""
        if self.conversation_id is None:
            raise AssertionError("no conversation is shown before the app mounts")
        return self.conversation_id

    def change_settings(self, settings: Settings) -> bool:
        """Apply `settings` now and save them; where they cannot be saved, say so once and go on with them."""
        self.settings = settings
        try:
            save_settings(settings, self.settings_path)
        except SettingsError as exc:
            if not self.settings_unsaved:
                self.notify(str(exc), severity="warning", timeout=15)
            self.settings_unsaved = True
            return False
        self.settings_unsaved = False
        return True

    def reload_catalog(self) -> None:
        try:
            self.catalog = load_catalog(self.catalog_file)
        except CatalogError as exc:
            self.notify(f"{exc} Using the shipped pairs only.", severity="error", timeout=15)

    def start_download(self, pair_id: str) -> bool:
        if self.download_cancel is not None:
            self.notify(f"{self.downloading_pair} is downloading; cancel it first (x).", severity="warning")
            return False
        self.downloading_pair = pair_id
        self.download_cancel = cancel = threading.Event()
        self.run_worker(partial(workers.download, self.post_message, self.hub_config, self.catalog.get(pair_id), cancel),
                        thread=True, group="download", name=f"download {pair_id}")
        return True

    def cancel_download(self) -> None:
        if self.download_cancel is not None:
            self.download_cancel.set()
