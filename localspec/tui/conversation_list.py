"""The sidebar: the conversations, newest first."""

from __future__ import annotations

from textual.widgets import Label, ListItem, ListView

from localspec.session.history import Conversation


class ConversationItem(ListItem):
    def __init__(self, conversation: Conversation) -> None:
        super().__init__(Label(conversation.title))
        self.conversation = conversation


class ConversationList(ListView):
    def show(self, conversations: list[Conversation], selected_id: int | None) -> None:
        self.clear()
        for conversation in conversations:
            self.append(ConversationItem(conversation))
        ids = [c.id for c in conversations]
        if selected_id in ids:
            self.index = ids.index(selected_id)
