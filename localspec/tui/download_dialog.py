"""Download progress, as a bar per file with bytes, speed and ETA; shared by the first-run offer and the models screen."""

from __future__ import annotations

from textual import getters
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Label, ProgressBar

from localspec.catalog.models_toml import Pair
from localspec.hub.progress import DownloadProgress, describe
from localspec.tui import messages as m
from localspec.tui.app_state import AppState


class DownloadView(Widget):
    """One line of text and a bar: which file, how far, how fast, how long."""

    DEFAULT_CSS = "DownloadView { height: auto; }"

    def compose(self) -> ComposeResult:
        yield Label("", classes="download-label")
        yield ProgressBar(total=100, show_eta=False, classes="download-bar")

    def show(self, progress: DownloadProgress) -> None:
        head, tail = describe(progress)
        self.query_one(Label).update(f"{head}  {tail}")
        self.query_one(ProgressBar).update(total=progress.file_total or 100, progress=progress.file_done if progress.file_total else 0)


class DownloadDialog(ModalScreen[bool]):
    """Downloads one pair; dismisses with True once it is verified, False when cancelled or failed."""

    app = getters.app(AppState)  # typed: the dialog starts and cancels its download through it

    BINDINGS = [Binding("x", "cancel_download", "Cancel download")]

    def __init__(self, pair: Pair) -> None:
        super().__init__()
        self.pair = pair

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Downloading {self.pair.title}")
            yield DownloadView()
            yield Label("An interrupted download resumes next time.", classes="dim")
            yield Button("Cancel (x)", id="cancel")

    def on_mount(self) -> None:
        if not self.app.start_download(self.pair.id):
            self.dismiss(False)

    def action_cancel_download(self) -> None:
        self.app.cancel_download()

    def on_button_pressed(self) -> None:
        self.action_cancel_download()

    def receive(self, message: object) -> None:
        if isinstance(message, m.DownloadProgressed):
            self.query_one(DownloadView).show(message.progress)
        elif isinstance(message, m.DownloadDone):
            self.dismiss(True)
        elif isinstance(message, m.DownloadFailed):
            self.dismiss(False)
