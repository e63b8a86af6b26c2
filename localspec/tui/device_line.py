"""The device status under the chat: repainted in place, and laid out again only when it needs another number of
lines (at 80 columns it wraps to two or three, where one line once cut it)."""

from __future__ import annotations

import textwrap

from textual.widget import Widget


class DeviceLine(Widget):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._text = ""
        self._lines = 1

    def render(self) -> str:
        return self._text

    def show(self, text: str) -> None:
        if text != self._text:
            self._text = text
            lines = max(1, len(textwrap.wrap(text, max(1, self.content_size.width))))
            self.refresh(layout=lines != self._lines)
            self._lines = lines
