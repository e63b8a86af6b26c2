"""The localspec app: chat with a pair while the statistics panel shows what speculation is doing."""

from __future__ import annotations

import os
import re
import threading
import time
from functools import partial
from pathlib import Path
from typing import Iterable

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, ListView

from localspec import paths
from localspec.catalog import Catalog, CatalogError, load_catalog, parse_catalog, shipped_catalog_text, user_catalog_path
from localspec.chat_session import LoadedPair, conversation_counts
from localspec.device import resident_memory_bytes
from localspec.engine.chat import Message as ChatMessage
from localspec.engine.hardware import gpu_offload_supported
from localspec.history import History, HistoryError
from localspec.hub.config import HubConfig
from localspec.hub.progress import format_bytes
from localspec.pair_files import local_pair_paths, model_state
from localspec.settings import Settings, load_settings, save_settings
from localspec.tui import messages as m
from localspec.tui import workers
from localspec.tui.conversation_list import ConversationItem, ConversationList
from localspec.tui.device_line import DeviceLine
from localspec.tui.dialogs import ConfirmDialog, HelpScreen, TextDialog
from localspec.tui.download_dialog import DownloadDialog
from localspec.tui.message_view import MessageView
from localspec.tui.models_screen import ModelsScreen
from localspec.tui.prompt_input import PromptInput
from localspec.tui.settings_screen import SettingsScreen
from localspec.tui.stats_panel import StatsPanel

LOAD_SETTINGS = ("n_ctx", "target_gpu_layers", "draft_gpu_layers", "threads")  # changing these reloads the pair
UI_CPU_SHARE_CONTENDED = 0.05
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


class LocalspecApp(App[None]):
    CSS_PATH = "localspec.tcss"
    TITLE = "localspec"
    BINDINGS = [
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+n", "new_conversation", "New chat"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("ctrl+t", "toggle_tint", "Tint"),
        Binding("f5", "copy_answer", "Copy"),
        Binding("f4", "edit_system_prompt", "System prompt", show=False),
        Binding("ctrl+b", "toggle_sidebar", "Chats", show=False),
        Binding("f2", "models", "Models"),
        Binding("f3", "settings", "Settings"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, hub_config: HubConfig | None = None, history_path: Path | None = None,
                 settings_path: Path | None = None, catalog_file: Path | None = None) -> None:
        super().__init__()
        self.hub_config = hub_config or HubConfig.from_env()
        self.history_path = history_path or paths.data_dir() / "history.sqlite3"
        self.settings_path = settings_path
        self.catalog_file = catalog_file or user_catalog_path()
        self.settings = Settings()
        self.catalog: Catalog = parse_catalog(shipped_catalog_text(), "models.toml (shipped with localspec)")
        self.history: History | None = None
        self.loaded: LoadedPair | None = None
        self.loading_pair: str | None = None
        self.load_cancel: threading.Event | None = None
        self.answer_cancel: threading.Event | None = None
        self.answer_drawn = threading.Event()
        self._paced_at = (0.0, 0.0)  # (wall, main-thread CPU) at the last update
        self.streaming: MessageView | None = None
        self.conversation_id: int | None = None
        self.download_cancel: threading.Event | None = None
        self.downloading_pair: str | None = None

    # --- layout -------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield ConversationList(id="sidebar")
            with Vertical(id="main"):
                yield VerticalScroll(id="messages")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="stats")
        yield DeviceLine(id="device")
        yield Footer()

    def on_mount(self) -> None:
        self.settings, note = load_settings(self.settings_path)
        if note:
            self.notify(note, severity="warning", timeout=10)
        self.reload_catalog()
        try:
            self.history = History(self.history_path)
        except HistoryError as exc:
            self.notify(f"{exc} This session is not saved.", severity="error", timeout=15)
            self.history = History(Path(":memory:"))
        conversations = self.history.conversations()
        self.show_conversation(conversations[0].id if conversations else self.history.create().id)
        if self.size.width < 100:
            self.query_one("#sidebar").display = False
        self.query_one(PromptInput).focus()
        self.set_interval(2.0, self.refresh_device_line)
        self.open_pair(self.settings.last_pair if self.settings.last_pair in self.catalog.pairs else self.catalog.default_id)

    def reload_catalog(self) -> None:
        try:
            self.catalog = load_catalog(self.catalog_file)
        except CatalogError as exc:
            self.notify(f"{exc} Using the shipped pairs only.", severity="error", timeout=15)

    # --- pairs: download, load ----------------------------------------------------------------------

    def open_pair(self, pair_id: str) -> None:
        pair = self.catalog.get(pair_id)
        states = [model_state(self.hub_config, ref) for ref in (pair.target, pair.draft)]
        if all(state.complete for state in states):
            self.start_loading(pair_id)
            return
        if any(ref.is_local for ref in (pair.target, pair.draft)) and not all(s.complete for s in states if s.ref.is_local):
            self.notify(f"Pair {pair_id!r} names a local file that is missing. Fix it in {pair.source}, or pick another pair (F2).", severity="error", timeout=15)
            self.set_device_text(f"{pair_id}: missing local file · F2 to pick a pair")
            return
        size = sum((ref.size or 0) for ref, state in zip((pair.target, pair.draft), states) if not state.complete)
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
        self.settings = self.settings.with_changes(last_pair=message.loaded.pair.id)
        save_settings(self.settings, self.settings_path)
        self.refresh_device_line()
        self.notify(f"{message.loaded.pair.title} is ready.", timeout=3)

    def on_pair_load_failed(self, message: m.PairLoadFailed) -> None:
        if message.pair_id != self.loading_pair:
            return
        self.loading_pair, self.load_cancel = None, None
        self.set_device_text(f"{message.pair_id} is not loaded · F2 to pick a pair")
        self.notify(message.error, severity="error" if "cancelled" not in message.error else "information", timeout=15)

    def set_device_text(self, text: str) -> None:
        self.query_one(DeviceLine).show(text)

    def refresh_device_line(self) -> None:
        if self.loaded is None:
            return
        loaded = self.loaded
        layers = " · ".join(f"{l.role} {l.on_gpu}/{l.total} layers on GPU" for l in loaded.layers)
        offload = "GPU offload available" if gpu_offload_supported() else "no GPU offload"
        self.set_device_text(f"{loaded.pair.id} · {loaded.backend} ({offload}) · {layers} · RAM {format_bytes(resident_memory_bytes())}")

    # --- downloads (driven by the models screen or the first-run offer) -----------------------------

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
        self.notify(message.error, severity="information" if message.cancelled else "error", timeout=15)
        self._forward(message)

    def on_check_done(self, message: m.CheckDone) -> None:
        self._forward(message)

    def on_check_failed(self, message: m.CheckFailed) -> None:
        self.notify(message.error, severity="error", timeout=10)
        self._forward(message)

    # --- conversations -------------------------------------------------------------------------------

    def show_conversation(self, conversation_id: int) -> None:
        assert self.history is not None
        self.conversation_id = conversation_id
        self.query_one(ConversationList).show(self.history.conversations(), conversation_id)
        container = self.query_one("#messages", VerticalScroll)
        container.remove_children()
        views = [MessageView(msg.role, msg.content, msg.provenance, msg.status, self._note(msg.pair_id, msg.stats),
                             self.settings.tint_accepted, msg.id) for msg in self.history.messages(conversation_id)]
        container.mount_all(views)
        container.scroll_end(animate=False)

    @staticmethod
    def _note(pair_id: str | None, stats: dict) -> str:  # type: ignore[type-arg]
        if not stats:
            return pair_id or ""
        n, ms = stats.get("predicted_n", 0), stats.get("predicted_ms", 0.0)
        rate = f"{1000 * n / ms:.1f} tok/s" if ms else ""
        drafted = stats.get("draft_n", 0)
        accepted = f"{100 * stats.get('draft_n_accepted', 0) / drafted:.0f}% accepted" if drafted else "plain"
        return " · ".join(part for part in (pair_id, rate, accepted) if part)

    @on(ListView.Selected, "#sidebar")
    def conversation_selected(self, event: ListView.Selected) -> None:
        if isinstance(event.item, ConversationItem) and event.item.conversation.id != self.conversation_id:
            if self.answer_cancel is not None:
                self.notify("An answer is streaming: stop it (Esc) before switching.", severity="warning")
                return
            self.show_conversation(event.item.conversation.id)

    def action_new_conversation(self) -> None:
        if self.answer_cancel is not None:
            self.notify("An answer is streaming: stop it (Esc) first.", severity="warning")
            return
        assert self.history is not None
        self.show_conversation(self.history.create().id)
        self.query_one(PromptInput).focus()

    def action_rename_conversation(self) -> None:
        assert self.history is not None and self.conversation_id is not None
        conversation = self.history.conversation(self.conversation_id)

        def renamed(title: str | None) -> None:
            if title and title.strip() and self.history is not None and self.conversation_id is not None:
                self.history.rename(self.conversation_id, title.strip())
                self.query_one(ConversationList).show(self.history.conversations(), self.conversation_id)

        self.push_screen(TextDialog("Rename this conversation", conversation.title), renamed)

    def action_delete_conversation(self) -> None:
        if self.answer_cancel is not None:
            self.notify("An answer is streaming: stop it (Esc) first.", severity="warning")
            return
        assert self.history is not None and self.conversation_id is not None
        conversation = self.history.conversation(self.conversation_id)

        def confirmed(yes: bool | None) -> None:
            if yes and self.history is not None:
                self.history.delete(conversation.id)
                remaining = self.history.conversations()
                self.show_conversation(remaining[0].id if remaining else self.history.create().id)

        self.push_screen(ConfirmDialog(f"Delete “{conversation.title}” and all its messages?", yes="Delete"), confirmed)

    def action_edit_system_prompt(self) -> None:
        assert self.history is not None and self.conversation_id is not None
        conversation = self.history.conversation(self.conversation_id)

        def edited(text: str | None) -> None:
            if text is not None and self.history is not None and self.conversation_id is not None:
                self.history.set_system_prompt(self.conversation_id, text)
                self.notify("System prompt saved for this conversation.", timeout=3)

        self.push_screen(TextDialog("System prompt for this conversation (Ctrl+S saves)", conversation.system_prompt, multiline=True), edited)

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = not sidebar.display

    # --- chatting ------------------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    async def prompt_submitted(self, event: PromptInput.Submitted) -> None:
        if self.answer_cancel is not None:
            self.notify("An answer is streaming: wait, or stop it with Esc.", severity="warning")
            return
        if self.loaded is None:
            self.notify("No pair is loaded yet" + (f" ({self.loading_pair} is loading)." if self.loading_pair else ": pick one with F2."), severity="warning")
            return
        assert self.history is not None and self.conversation_id is not None
        self.query_one(PromptInput).clear()
        message_id = self.history.add_user_message(self.conversation_id, event.text)
        conversation = self.history.conversation(self.conversation_id)
        if conversation.title == "New chat":
            self.history.rename(self.conversation_id, event.text.splitlines()[0][:40])
            self.query_one(ConversationList).show(self.history.conversations(), self.conversation_id)
        await self.query_one("#messages", VerticalScroll).mount(MessageView("user", event.text, message_id=message_id))
        await self.start_answer()

    async def start_answer(self) -> None:
        assert self.history is not None and self.conversation_id is not None and self.loaded is not None
        conversation = self.history.conversation(self.conversation_id)
        stored = self.history.messages(self.conversation_id)
        chat = ([ChatMessage("system", conversation.system_prompt)] if conversation.system_prompt else []) + [
            ChatMessage(msg.role, msg.content) for msg in stored if msg.content or msg.role == "user"
        ]
        counts = conversation_counts([msg.stats for msg in stored if msg.role == "assistant"])
        message_id = self.history.start_answer(self.conversation_id, self.loaded.pair.id, self.settings.generation_dict())
        view = MessageView("assistant", tint=self.settings.tint_accepted, message_id=message_id, status="streaming")
        container = self.query_one("#messages", VerticalScroll)
        await container.mount(view)
        view.start_stream()
        container.scroll_end(animate=False)
        self.streaming = view
        self.answer_cancel = cancel = threading.Event()
        self.answer_drawn = drawn = threading.Event()
        drawn.set()
        self._paced_at = (time.perf_counter(), time.thread_time())
        self.run_worker(partial(workers.answer, self.post_message, self.loaded, chat, self.settings, self.history, message_id, cancel, counts, drawn),
                        thread=True, group="answer", name="answer")

    def ui_cpu_share(self) -> float:
        """How much of one core drawing may take while an answer streams.

        When llama.cpp's threads fill every core, each millisecond spent drawing is
        taken from generation; the updates are then spaced so that drawing stays
        near 5% of a core. With a core to spare, drawing runs at the full ten updates a second.
        """
        threads = self.loaded.engine.target.n_threads if self.loaded is not None else 1
        return 1.0 if (os.cpu_count() or 1) > threads else UI_CPU_SHARE_CONTENDED

    def _pace(self) -> None:
        """Let the worker send its next update once drawing is back within its CPU share.

        The main thread's CPU time since the last update (drawing it, and whatever
        else the UI did) is weighed against the wall time that passed.
        """
        now, cpu = time.perf_counter(), time.thread_time()
        used, elapsed = cpu - self._paced_at[1], now - self._paced_at[0]
        self._paced_at = (now, cpu)
        wait = used / self.ui_cpu_share() - elapsed
        if wait > 0:
            self.set_timer(wait, self.answer_drawn.set)
        else:
            self.answer_drawn.set()

    async def on_answer_progress(self, message: m.AnswerProgress) -> None:
        if self.streaming is None or self.streaming.message_id != message.message_id:
            return
        container = self.query_one("#messages", VerticalScroll)
        follow = container.scroll_offset.y >= container.max_scroll_y - 2
        await self.streaming.append(message.update.pieces)
        self.query_one(StatsPanel).show(message.update.snapshot)
        if follow:
            container.scroll_end(animate=False)
        self.call_after_refresh(self._pace)  # the next update may follow once this one is on screen, within budget

    async def on_answer_done(self, message: m.AnswerDone) -> None:
        view = self.streaming
        if view is None or view.message_id != message.message_id:
            return
        result = message.result
        status = "stopped" if result.finished.reason.value == "cancelled" else "complete"
        note = self._note(self.loaded.pair.id if self.loaded else None, result.finished.stats.to_dict())
        await view.finish(result.text, result.provenance, status, note)
        self.query_one(StatsPanel).show(result.snapshot)
        if result.finished.message:
            self.notify(result.finished.message, severity="warning", timeout=10)
        self.query_one("#messages", VerticalScroll).scroll_end(animate=False)
        self.streaming, self.answer_cancel = None, None  # last: "not streaming" means the view is final

    def on_answer_failed(self, message: m.AnswerFailed) -> None:
        if self.streaming is not None and self.streaming.message_id == message.message_id:
            self.streaming.set_status("error")
        self.streaming, self.answer_cancel = None, None
        self.notify(message.error, severity="error", timeout=15)

    def action_stop(self) -> None:
        if self.answer_cancel is not None:
            self.answer_cancel.set()
        elif self.load_cancel is not None:
            self.load_cancel.set()
        elif len(self.screen_stack) > 1:
            self.pop_screen()

    async def action_regenerate(self) -> None:
        if self.answer_cancel is not None or self.loaded is None:
            self.notify("Regenerate needs a loaded pair and no answer streaming.", severity="warning")
            return
        assert self.history is not None and self.conversation_id is not None
        stored = self.history.messages(self.conversation_id)
        if not stored or stored[-1].role != "assistant":
            self.notify("There is no answer to regenerate yet.", severity="warning")
            return
        self.history.delete_message(stored[-1].id)
        views = list(self.query_one("#messages", VerticalScroll).query(MessageView))
        if views and views[-1].role == "assistant":
            await views[-1].remove()
        await self.start_answer()

    def action_toggle_tint(self) -> None:
        self.settings = self.settings.with_changes(tint_accepted=not self.settings.tint_accepted)
        save_settings(self.settings, self.settings_path)
        for view in self.query(MessageView):
            view.set_tint(self.settings.tint_accepted)
        self.notify("Accepted draft tokens tinted." if self.settings.tint_accepted else "Tint off: Markdown view.", timeout=2)

    def _last_answer(self) -> str | None:
        views = [v for v in self.query(MessageView) if v.role == "assistant" and v.text]
        return views[-1].text if views else None

    def action_copy_answer(self) -> None:
        text = self._last_answer()
        if text is None:
            self.notify("No answer to copy yet.", severity="warning")
            return
        self.copy_to_clipboard(text)
        self.notify("The last answer is on the clipboard.", timeout=2)

    def action_copy_code(self) -> None:
        blocks = CODE_BLOCK.findall(self._last_answer() or "")
        if not blocks:
            self.notify("The last answer has no code block.", severity="warning")
            return
        self.copy_to_clipboard(blocks[-1])
        self.notify("The last code block is on the clipboard.", timeout=2)

    # --- other screens -------------------------------------------------------------------------------

    def action_models(self) -> None:
        if not isinstance(self.screen, ModelsScreen):
            self.push_screen(ModelsScreen())

    def action_settings(self) -> None:
        def saved(settings: Settings | None) -> None:
            if settings is None:
                return
            reload = any(getattr(settings, name) != getattr(self.settings, name) for name in LOAD_SETTINGS)
            self.settings = settings
            save_settings(settings, self.settings_path)
            self.notify("Settings saved.", timeout=2)
            if reload and self.loaded is not None:
                self.start_loading(self.loaded.pair.id)

        self.push_screen(SettingsScreen(self.settings), saved)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("New conversation", "Start an empty conversation (Ctrl+N)", self.action_new_conversation)
        yield SystemCommand("Rename conversation", "Give this conversation a title", self.action_rename_conversation)
        yield SystemCommand("Delete conversation", "Delete this conversation, after asking", self.action_delete_conversation)
        yield SystemCommand("Edit system prompt", "This conversation's system prompt (F4)", self.action_edit_system_prompt)
        yield SystemCommand("Regenerate", "Answer the last prompt again (Ctrl+R)", self.action_regenerate)
        yield SystemCommand("Copy answer", "Copy the last answer (F5)", self.action_copy_answer)
        yield SystemCommand("Copy code block", "Copy the last code block of the last answer", self.action_copy_code)
        yield SystemCommand("Toggle tint", "Tint accepted draft tokens (Ctrl+T)", self.action_toggle_tint)
        yield SystemCommand("Models", "Download, check and pick a pair (F2)", self.action_models)
        yield SystemCommand("Settings", "Drafter, sampling, context, GPU layers (F3)", self.action_settings)
        yield SystemCommand("Help", "Keys and what the panel shows (F1)", self.action_help)

    def on_unmount(self) -> None:
        for cancel in (self.answer_cancel, self.load_cancel, self.download_cancel):
            if cancel is not None:
                cancel.set()
        self.workers.cancel_all()
