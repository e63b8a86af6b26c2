"""The prompt box: Enter sends, Ctrl+J (or Shift+Enter where the terminal reports it) starts a new line."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.strip import Strip
from textual.widgets import TextArea

PLACEHOLDER = "Ask something. Enter sends; Ctrl+J starts a new line; F1 lists every key."


class PromptInput(TextArea):
    """No cursor blink: a blinking cursor repaints twice a second, CPU that generation needs more."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("placeholder", PLACEHOLDER)
        super().__init__(soft_wrap=True, show_line_numbers=False, **kwargs)  # type: ignore[arg-type]
        self.cursor_blink = False

    def render_line(self, y: int) -> Strip:
        """Nothing where the box has no columns left for text: Textual's placeholder, wrapped to width 0, raised
        `range() arg 3 must not be zero` (the app then died with a 1,000-line traceback)."""
        if self.content_size.width < 1:
            return Strip.blank(self.size.width)
        return super().render_line(y)

    @dataclass
    class Submitted(Message):
        text: str

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.prevent_default()
            event.stop()
            text = self.text.strip()
            if text:
                self.post_message(self.Submitted(text))
            return
        if event.key in ("ctrl+j", "shift+enter"):
            event.prevent_default()
            event.stop()
            self.insert("\n")
            return
        await super()._on_key(event)
