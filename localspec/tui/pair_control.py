"""The app's pair life cycle: offer a download, load in a worker, show the device line, run downloads.

A mixin of LocalspecApp: it keeps the app's own attributes (catalog, settings,
loaded pair), and the worker messages it handles are the app's.
"""

from __future__ import annotations

import threading
from functools import partial

from localspec.catalog.models_toml import CatalogError
from localspec.catalog.pair_files import download_status, local_pair_paths, pair_states
from localspec.engine.llama.hardware import gpu_offload_supported
from localspec.machine.device import resident_memory_bytes
from localspec.tui import messages as m
from localspec.tui import workers
from localspec.tui.app_state import AppState
from localspec.tui.device_line import DeviceLine
from localspec.tui.dialogs import ConfirmDialog
from localspec.tui.download_dialog import DownloadDialog
from localspec.units import format_bytes


class PairControl(AppState):
    def pair_to_open(self) -> str:
        """The pair the command line named, else the last pair used: the settings' (which a damaged settings file loses),
        else the history's last answer's, else a pair whose files are here (the default first), else the default, which
        is offered for download."""
        for pair_id in (self.requested_pair, self.settings.last_pair, *self.history.pairs_used()):
            if pair_id is not None and pair_id in self.catalog.pairs:
                return pair_id
        default = self.catalog.default
        for pair in (default, *self.catalog.pairs.values()):
            if download_status(pair_states(self.hub_config, pair)) == "yes":
                return pair.id
        return default.id

    def open_pair(self, pair_id: str) -> None:
        """Load the pair if its files are here; else offer to download it."""
        pair = self.catalog.get(pair_id)
        states = pair_states(self.hub_config, pair)
        if download_status(states) == "yes":
            self.start_loading(pair_id)
            return
        if any(ref.is_local for _, ref in pair.models) and not all(s.complete for s in states if s.ref.is_local):
            self.notify(f"Pair {pair_id!r} names a local file that is missing. Fix it in {pair.source}, or pick another pair (F2).",
                        severity="error", timeout=15)
            self.set_device_text(f"{pair_id}: missing local file · F2 to pick a pair")
            return
        size = sum((state.ref.size or 0) for state in states if not state.complete)
        self.set_device_text(f"{pair_id} is not downloaded · F2 for models")

        def answered(download: bool | None) -> None:
            if download:
                self.push_screen(DownloadDialog(pair), lambda ok: self.start_loading(pair_id) if ok else None)

        self.push_screen(ConfirmDialog(f"{pair.title} is not downloaded yet ({format_bytes(size) if size else 'size unknown'}). Download it now?",
                                       yes="Download"), answered)

    def start_loading(self, pair_id: str) -> None:
        if self.answer_cancel is not None:
            self.notify("Stop the answer first (Esc), then switch pairs.", severity="warning")
            return
        if self.load_cancel is not None:
            self.load_cancel.set()
        pair = self.catalog.get(pair_id)
        try:
            target, draft = local_pair_paths(self.hub_config, pair)
        except CatalogError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        if self.loaded is not None:
            self.loaded.close()
            self.loaded = None
        self.loading_pair = pair_id
        self.load_cancel = cancel = threading.Event()
        self.set_device_text(f"Loading {pair_id}… (Esc cancels)")
        self.run_worker(partial(workers.load, self.post_message, pair, target, draft, self.settings, cancel),
                        thread=True, group="load", name=f"load {pair_id}")

    def on_pair_load_stage(self, message: m.PairLoadStage) -> None:
        if message.pair_id == self.loading_pair:
            self.set_device_text(f"Loading {message.pair_id}: {message.stage}… (Esc cancels)")

    def on_pair_loaded(self, message: m.PairLoaded) -> None:
        if message.loaded.pair.id != self.loading_pair:  # superseded by a later choice
            message.loaded.close()
            return
        self.loaded, self.loading_pair, self.load_cancel = message.loaded, None, None
        self.change_settings(self.settings.with_changes(last_pair=message.loaded.pair.id))
        self.refresh_device_line()
        self.notify(f"{message.loaded.pair.title} is ready.", timeout=3)
        for warning in message.loaded.plan.warnings:
            self.notify(f"Memory plan: {warning}.", severity="warning", timeout=15)
        if message.loaded.engine.drafting_note:
            self.notify(f"Drafting: {message.loaded.engine.drafting_note}.", severity="warning", timeout=15)
        if message.loaded.chat_problem:
            self.notify(self.cannot_chat(message.loaded.chat_problem), severity="error", timeout=30)

    def cannot_chat(self, problem: str) -> str:
        """What to do with a pair the app cannot chat with: the app has no raw mode, the command line has."""
        return f"This pair cannot chat: {problem} The app only chats, so pick a pair with a chat model (F2)."

    def on_pair_load_failed(self, message: m.PairLoadFailed) -> None:
        if message.pair_id != self.loading_pair:
            return
        self.loading_pair, self.load_cancel = None, None
        self.set_device_text(f"{message.pair_id} is not loaded · F2 to pick a pair")
        self.notify(message.error, severity="information" if message.cancelled else "error", timeout=15)

    def set_device_text(self, text: str) -> None:
        """The device line lives on the main screen. A query from the app searches the screen on top, which may be
        the models or settings screen, or nothing while the app closes: both killed the app on the 2 s refresh."""
        for line in self.screen_stack[0].query(DeviceLine) if self.screen_stack else ():
            line.show(text)

    def refresh_device_line(self) -> None:
        if self.loaded is None:
            return
        loaded = self.loaded
        layers = ", ".join(f"{layer.role} {layer.on_gpu}/{layer.total}" for layer in loaded.layers)
        offload = "GPU offload available" if gpu_offload_supported() else "no GPU offload"
        self.set_device_text(f"{loaded.pair.id} · {loaded.backend} ({offload}) · {layers} layers on GPU · "
                             f"planned {loaded.plan.amounts} · in use RAM {format_bytes(resident_memory_bytes())}")

    # --- what downloads and checks report (a download starts in AppState, where its dialog reaches it) --

    def _forward(self, message: object) -> None:
        """Download and check messages go to whichever screen shows them."""
        for screen in reversed(self.screen_stack):
            handler = getattr(screen, "receive", None)
            if handler is not None:
                handler(message)
                return

    def on_download_progressed(self, message: m.DownloadProgressed) -> None:
        self._forward(message)

    def on_download_done(self, message: m.DownloadDone) -> None:
        self.download_cancel = self.downloading_pair = None
        self.notify(f"{message.pair_id} is downloaded and verified.", timeout=5)
        self._forward(message)

    def on_download_failed(self, message: m.DownloadFailed) -> None:
        self.download_cancel = self.downloading_pair = None
        hint = " GGUF files already on this machine can be added as a pair: F2, then a." if message.unreachable else ""
        self.notify(message.error + hint, severity="information" if message.cancelled else "error", timeout=20)
        self._forward(message)

    def on_check_done(self, message: m.CheckDone) -> None:
        self._forward(message)

    def on_check_failed(self, message: m.CheckFailed) -> None:
        self.notify(message.error, severity="error", timeout=10)
        self._forward(message)
