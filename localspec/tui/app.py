"""The localspec app: chat with a pair while the statistics panel shows what speculation is doing.

This module composes the screen and runs answers; the pair life cycle (download,
load, device line) is PairControl's, the conversations are ConversationControl's.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
from collections.abc import Iterable
from functools import partial

from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Footer

from localspec.engine.chat import Message as ChatMessage
from localspec.engine.chat import with_system
from localspec.session.chat import conversation_counts
from localspec.session.history import History, HistoryError
from localspec.session.settings import Settings, load_settings
from localspec.tui import messages as m
from localspec.tui import workers
from localspec.tui.conversation_control import ConversationControl
from localspec.tui.conversation_list import ConversationList
from localspec.tui.device_line import DeviceLine
from localspec.tui.dialogs import ConfirmDialog, HelpScreen
from localspec.tui.draw_pacer import DrawPacer
from localspec.tui.message_view import MessageView, answer_note
from localspec.tui.models_screen import ModelsScreen
from localspec.tui.pair_control import PairControl
from localspec.tui.prompt_input import PromptInput
from localspec.tui.settings_screen import SettingsScreen
from localspec.tui.stats_panel import StatsPanel
from localspec.tui.toast_text import breakable, toast_text_width

CLOSING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # `kill`, a closed terminal window: the exit status is 128 + the signal
SIDEBAR_MIN_WIDTH = 100  # narrower, the conversation list would squeeze the chat: it hides (Ctrl+B shows it)
SIDEBAR_WIDTH = 24  # the stylesheet's #sidebar width, and at most half the terminal's (Ctrl+B at 30 columns)
STATS_WIDTH = 30  # the stylesheet's #stats width, beside the chat
# The chat keeps at least this many columns beside the statistics; narrower, the panel folds into one line under the
# chat (at 50x15 it kept 29 columns while the chat got 20, and with the list shown too the prompt got none: a crash).
CHAT_MIN_WIDTH = 46
LOAD_SETTINGS = ("n_ctx", "target_gpu_layers", "draft_gpu_layers", "threads", "self_draft_layers", "rpc_servers")  # changing these reloads the pair
CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


class LocalspecApp(PairControl, ConversationControl):
    CSS_PATH = "localspec.tcss"
    TITLE = "localspec"
    # Screens get these classes by the terminal's size; the stylesheet gives dialogs their margins back on them (at 50x15
    # the settings form had 2 rows for its fields and 12 columns for its hints).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (70, "-roomy")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (20, "-tall")]
    # In the footer's order, the screens first: at 80 columns the footer shows about eight, and F1 (which lists
    # every key) and F3 fell off its end.
    BINDINGS = [
        Binding("f1", "help", "Help"),
        Binding("f2", "models", "Models"),
        Binding("f3", "settings", "Settings"),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+n", "new_conversation", "New chat"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("f5", "copy_answer", "Copy", show=False),  # F1 lists these two
        Binding("ctrl+t", "toggle_tint", "Tint", show=False),
        Binding("f4", "edit_system_prompt", "System prompt", show=False),
        Binding("ctrl+b", "toggle_sidebar", "Chats", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    # --- layout -------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield ConversationList(id="sidebar")
            with Vertical(id="main"):
                yield VerticalScroll(id="messages")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="stats")
        yield DeviceLine(id="device")
        yield Footer(compact=True, show_command_palette=False)  # Ctrl+P still opens it; F1 says so

    def on_mount(self) -> None:
        # A signal closes the app as Ctrl+Q does, so the terminal gets its modes back (the alternate screen, mouse
        # reporting): left to Python's default, SIGTERM mid-answer left the terminal unusable until `reset`.
        loop = asyncio.get_running_loop()
        for signum in CLOSING_SIGNALS:
            loop.add_signal_handler(signum, self.exit, None, 128 + signum)
        self.settings, note = load_settings(self.settings_path)
        if note:
            self.notify(note, severity="warning", timeout=10)
        self.reload_catalog()
        # The history says when saving stops and starts again; it may say so from the answer's worker thread.
        self.history = History(self.history_path, on_notice=lambda text: self.post_message(m.StorageNotice(text)))
        if self.history.open_problem:
            self.notify(self.history.open_problem, severity="error", timeout=30)
        if self.startup_notice:
            self.notify(self.startup_notice, timeout=15)
        conversations = self.history.conversations()
        self.show_conversation(conversations[0].id if conversations else self.history.create().id)
        # Anchored, the chat follows an answer as it grows (however late its Markdown lays out) until the user scrolls
        # up; scrolling back to the end follows again. A follow judged per update lost the answer below the fold.
        self.query_one("#messages", VerticalScroll).anchor()
        self.wide = self.size.width >= SIDEBAR_MIN_WIDTH
        self.query_one("#sidebar").display = self.wide
        self.fit_panes(self.size.width)
        self.query_one(PromptInput).focus()
        self.set_interval(2.0, self.refresh_device_line)
        self.open_pair(self.pair_to_open())

    def on_resize(self, event: events.Resize) -> None:
        """The conversation list shows when the terminal grows past SIDEBAR_MIN_WIDTH and hides when it shrinks below;
        Ctrl+B in between is the user's to keep."""
        wide = event.size.width >= SIDEBAR_MIN_WIDTH
        if wide != self.wide and self.screen_stack:
            for sidebar in self.screen_stack[0].query("#sidebar"):
                sidebar.display = wide
        self.wide = wide
        self.fit_panes(event.size.width)

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = not sidebar.display
        self.fit_panes(self.size.width)

    def fit_panes(self, width: int) -> None:
        """The statistics sit beside the chat where it keeps CHAT_MIN_WIDTH columns, else fold into a line under it."""
        main = self.screen_stack[0] if self.screen_stack else None
        if main is None or not main.query("#stats"):
            return
        sidebar = min(SIDEBAR_WIDTH, width // 2) if main.query_one("#sidebar").display else 0
        main.query_one(StatsPanel).fold(width - sidebar - STATS_WIDTH < CHAT_MIN_WIDTH)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every toast, broken between words and after a path's slashes (toast_text): Textual cut them mid-word."""
        super().notify(breakable(message, toast_text_width(self.size.width)), title=title, severity=severity, timeout=timeout,
                       markup=markup)

    # --- chatting ------------------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    async def prompt_submitted(self, event: PromptInput.Submitted) -> None:
        if self.busy():
            return
        if self.loaded is None:
            self.notify("No pair is loaded yet" + (f" ({self.loading_pair} is loading)." if self.loading_pair else ": pick one with F2."), severity="warning")
            return
        if self.loaded.chat_problem:  # said at load; the prompt stays in the box
            self.notify(self.cannot_chat(self.loaded.chat_problem), severity="error", timeout=15)
            return
        assert self.conversation_id is not None
        try:
            message_id = self.history.add_user_message(self.conversation_id, event.text)
            conversation = self.history.conversation(self.conversation_id)
            if conversation.title == "New chat":
                self.history.rename(self.conversation_id, event.text.splitlines()[0][:40])
                self.refresh_sidebar()
        except HistoryError as exc:
            self.notify(f"{exc} Your prompt is still in the box.", severity="error", timeout=15)
            return
        self.query_one(PromptInput).clear()  # only once the prompt is kept in the conversation
        await self.query_one("#messages", VerticalScroll).mount(MessageView("user", event.text, message_id=message_id))
        await self.start_answer()

    async def start_answer(self) -> None:
        assert self.conversation_id is not None and self.loaded is not None
        conversation = self.history.conversation(self.conversation_id)
        stored = self.history.messages(self.conversation_id)
        chat = with_system(conversation.system_prompt, [ChatMessage(msg.role, msg.content) for msg in stored if msg.content or msg.role == "user"])
        counts = conversation_counts([msg.stats for msg in stored if msg.role == "assistant"])
        message_id = self.history.start_answer(self.conversation_id, self.loaded.pair.id, self.settings.generation_dict())
        view = MessageView("assistant", tint=self.settings.tint_accepted, message_id=message_id, status="streaming")
        container = self.query_one("#messages", VerticalScroll)
        await container.mount(view)
        view.start_stream()
        container.scroll_end(animate=False)
        self.streaming = view
        self.answer_cancel = cancel = threading.Event()
        self.pacer = DrawPacer(self.loaded.engine.target.n_threads)
        self.run_worker(partial(workers.answer, self.post_message, self.loaded, chat, self.settings, self.history, message_id, cancel,
                                counts, self.pacer.drawn), thread=True, group="answer", name="answer")

    def _pace(self) -> None:
        wait = self.pacer.wait_before_next()
        if wait > 0:
            self.set_timer(wait, self.pacer.drawn.set)
        else:
            self.pacer.drawn.set()

    def on_answer_stage(self, message: m.AnswerStage) -> None:
        if self.streaming is not None and self.streaming.message_id == message.message_id and not self.streaming.text:
            self.streaming.set_waiting(message.stage)

    async def on_answer_progress(self, message: m.AnswerProgress) -> None:
        if self.streaming is None or self.streaming.message_id != message.message_id:
            return
        await self.streaming.append(message.update.pieces)
        self.query_one(StatsPanel).show(message.update.snapshot)
        self.call_after_refresh(self._pace)  # the next update may follow once this one is on screen, within budget

    async def on_answer_done(self, message: m.AnswerDone) -> None:
        view = self.streaming
        if view is None or view.message_id != message.message_id:
            return
        result = message.result
        note = answer_note(self.loaded.pair.id if self.loaded else None, result.finished.stats.to_dict())
        await view.finish(result.text, result.provenance, result.status, note)
        self.query_one(StatsPanel).show(result.snapshot)
        if result.slowed is not None:
            self.notify(result.slowed.note(), severity="warning", timeout=12)
        if result.dropped_messages:
            self.notify(f"This conversation is longer than the context ({self.loaded.engine.target.n_ctx if self.loaded else '?'} tokens): "
                        f"the oldest {result.dropped_messages} messages were left out of this answer's prompt. They stay in the "
                        "history; start a new chat (Ctrl+N) or raise the context size (F3) to keep them in.", timeout=15)
        if result.finished.message:
            self.notify(result.finished.message, severity="warning", timeout=10)
        self.streaming, self.answer_cancel = None, None  # last: "not streaming" means the view is final

    def on_storage_notice(self, message: m.StorageNotice) -> None:
        self.notify(message.text, severity="information" if self.history.saving else "error", timeout=20)

    async def on_answer_failed(self, message: m.AnswerFailed) -> None:
        view = self.streaming
        if view is not None and view.message_id == message.message_id and self.conversation_id is not None:
            # the screen may lag the answer by the updates still waiting to be drawn; the history has all of it
            stored = next((s for s in self.history.messages(self.conversation_id) if s.id == message.message_id), None)
            if stored is not None and len(stored.content) >= len(view.text):
                await view.finish(stored.content, stored.provenance, "error", view.note, message.error)
            else:
                view.set_status("error", error=message.error)
        self.streaming, self.answer_cancel = None, None
        self.notify(message.error, severity="error", timeout=15)

    async def action_quit(self) -> None:
        """Quit; where this session's chats live only in memory (the disk refused them), ask first: quitting loses them."""
        if self.history.save_now():
            self.exit()
            return
        question = (f"This session's chats are only in memory: {self.history.path} cannot be written. Quit and lose them? "
                    "Cancel keeps localspec open, trying to save them every 30 seconds (F5 copies an answer meanwhile).")
        self.push_screen(ConfirmDialog(question, yes="Quit and lose them"), lambda quit_: self.exit() if quit_ else None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc stops an answer or a load first; with nothing to stop, a screen with its own Esc (Back, Cancel, Close)
        gets the key and the footer says what it does there, not "Stop"."""
        if action == "stop" and self.answer_cancel is None and self.load_cancel is None and len(self.screen_stack) > 1:
            return not any(isinstance(b, Binding) and b.key == "escape" for b in type(self.screen).BINDINGS)
        return True

    def action_stop(self) -> None:
        if self.answer_cancel is not None:
            self.answer_cancel.set()
        elif self.load_cancel is not None:
            self.load_cancel.set()
        elif len(self.screen_stack) > 1:
            self.pop_screen()

    async def action_regenerate(self) -> None:
        if self.busy():
            return
        if self.loaded is None:
            self.notify("Regenerate needs a loaded pair: pick one with F2.", severity="warning")
            return
        assert self.conversation_id is not None
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
        self.change_settings(self.settings.with_changes(tint_accepted=not self.settings.tint_accepted))
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
            if self.change_settings(settings):
                self.notify("Settings saved.", timeout=2)
            if reload and self.loaded is not None:
                self.start_loading(self.loaded.pair.id)

        self.push_screen(SettingsScreen(self.settings, self.loaded.engine.parts if self.loaded is not None else None), saved)

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
        loop = asyncio.get_running_loop()
        for signum in CLOSING_SIGNALS:
            loop.remove_signal_handler(signum)
        for cancel in (self.answer_cancel, self.load_cancel, self.download_cancel):
            if cancel is not None:
                cancel.set()
        self.workers.cancel_all()
        if hasattr(self, "history"):
            self.history.close()  # where saving had stopped, one last try to write the session back
