"""Splitting a streamed answer into parts by tags (`<think>`, `<tool_call>`) without waiting for the whole answer.

Text is passed on as soon as it cannot be the start of the awaited tag; only a
tail that could still become the tag (`<too`) is held back, so a client sees the
answer at the speed it is generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _held_back(text: str, tag: str) -> int:
    """How many characters at the end of `text` could be the start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


@dataclass
class TagSplitter:
    """Routes text between an outer and an inner part: `open` enters the inner part, `close` leaves it.

    `feed` returns (part, text) pieces in order, part being "outer" or "inner"; `end` flushes what was held.
    """

    open: str
    close: str
    inside: bool = False
    _pending: str = field(default="", repr=False)

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._pending += text
        out: list[tuple[str, str]] = []
        while True:
            tag = self.close if self.inside else self.open
            index = self._pending.find(tag)
            part = "inner" if self.inside else "outer"
            if index < 0:
                keep = _held_back(self._pending, tag)
                ready, self._pending = self._pending[: len(self._pending) - keep], self._pending[len(self._pending) - keep :]
                if ready:
                    out.append((part, ready))
                return out
            if index:
                out.append((part, self._pending[:index]))
            self._pending = self._pending[index + len(tag) :]
            self.inside = not self.inside
            out.append(("enter" if self.inside else "leave", ""))

    def end(self) -> list[tuple[str, str]]:
        rest, self._pending = self._pending, ""
        return [("inner" if self.inside else "outer", rest)] if rest else []
