"""The one-line device status under the chat: repainted in place, never re-laid-out."""

from __future__ import annotations

from textual.widget import Widget


class DeviceLine(Widget):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._text = ""

    def render(self) -> str:
        return self._text

    def show(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self.refresh()
