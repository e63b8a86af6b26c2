"""The app's conversations: show one, switch, start, rename, delete, edit the system prompt.

A mixin of LocalspecApp, over its history and its chat widgets.
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.widgets import ListView

from localspec.tui.app_state import AppState
from localspec.tui.conversation_list import ConversationItem, ConversationList
from localspec.tui.dialogs import ConfirmDialog, TextDialog
from localspec.tui.message_view import MessageView, answer_note
from localspec.tui.prompt_input import PromptInput
from localspec.tui.stats_panel import StatsPanel


class ConversationControl(AppState):
    def busy(self) -> bool:
        """True (and the user told why) while an answer streams: the conversation must not change under it."""
        if self.answer_cancel is not None:
            self.notify("An answer is streaming: stop it (Esc) first.", severity="warning")
            return True
        return False

    def show_conversation(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.refresh_sidebar()
        container = self.query_one("#messages", VerticalScroll)
        container.remove_children()
        views = [MessageView(msg.role, msg.content, msg.provenance, msg.status, answer_note(msg.pair_id, msg.stats),
                             self.settings.tint_accepted, msg.id, msg.error) for msg in self.history.messages(conversation_id)]
        container.mount_all(views)
        container.scroll_end(animate=False)

    def refresh_sidebar(self) -> None:
        self.query_one(ConversationList).show(self.history.conversations(), self.conversation_id)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        if event.list_view.id != "sidebar" or not isinstance(event.item, ConversationItem):
            return
        if event.item.conversation.id != self.conversation_id and not self.busy():
            self.show_conversation(event.item.conversation.id)
        self.query_one(PromptInput).focus()  # what is typed next goes to the chat picked, not to the list

    def action_new_conversation(self) -> None:
        if not self.busy():
            self.show_conversation(self.history.create().id)
            self.query_one(StatsPanel).clear()
            self.query_one(PromptInput).focus()

    def action_rename_conversation(self) -> None:
        conversation = self.history.conversation(self.shown_conversation())

        def renamed(title: str | None) -> None:
            if title and title.strip():
                self.history.rename(conversation.id, title.strip())
                self.refresh_sidebar()

        self.push_screen(TextDialog("Rename this conversation", conversation.title), renamed)

    def action_delete_conversation(self) -> None:
        if self.busy():
            return
        conversation = self.history.conversation(self.shown_conversation())

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.history.delete(conversation.id)
                remaining = self.history.conversations()
                self.show_conversation(remaining[0].id if remaining else self.history.create().id)

        self.push_screen(ConfirmDialog(f"Delete “{conversation.title}” and all its messages?", yes="Delete"), confirmed)

    def action_edit_system_prompt(self) -> None:
        conversation = self.history.conversation(self.shown_conversation())

        def edited(text: str | None) -> None:
            if text is not None:
                self.history.set_system_prompt(conversation.id, text)
                self.notify("System prompt saved for this conversation.", timeout=3)

        self.push_screen(TextDialog("System prompt for this conversation (Ctrl+S saves)", conversation.system_prompt, multiline=True), edited)
