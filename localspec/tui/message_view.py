"""One message in the chat: a header line and its body, streamed as Markdown, or tinted by provenance.

The assistant's answer streams through Textual's MarkdownStream and gets one full
render at the end, so code blocks stay intact. With the tint on, the answer is
shown as text whose accepted draft tokens are coloured (LM Studio's "visualize
accepted draft tokens"); corrections and bonus tokens keep the normal colour.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Markdown, Static
from textual.widgets._markdown import MarkdownStream

ACCEPTED_STYLE = "on #1f3d2b"
STATUS_NOTES = {"stopped": " · stopped", "cut": " · cut (the context was full)", "max_tokens": " · cut at max tokens (F3 raises it)",
                "interrupted": " · interrupted (the app closed mid-answer)", "error": " · failed"}


def answer_note(pair_id: str | None, stats: dict[str, Any]) -> str:
    """The header's summary of an answer, from its stored statistics (GenerationStats.to_dict)."""
    if not stats:
        return pair_id or ""
    rate = f"{stats['predicted_per_second']:.1f} tok/s" if stats.get("predicted_per_second") else ""
    drafted = stats.get("draft_n") or 0  # counted from the counts: a stored answer of an older version may lack the rate
    accepted = f"{100 * (stats.get('draft_n_accepted') or 0) / drafted:.0f}% accepted" if drafted else "plain"
    return " · ".join(part for part in (pair_id, rate, accepted) if part)


def tinted(text: str, runs: list[tuple[str, int]]) -> Text:
    out = Text()
    position = 0
    for source, length in runs:
        out.append(text[position : position + length], style=ACCEPTED_STYLE if source == "accepted" else "")
        position += length
    out.append(text[position:])
    return out


class MessageView(Vertical):
    DEFAULT_CLASSES = "message"

    def __init__(self, role: str, text: str = "", runs: list[tuple[str, int]] | None = None, status: str = "complete",
                 note: str = "", tint: bool = False, message_id: int | None = None, error: str | None = None) -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self.text = text
        self.runs: list[tuple[str, int]] = list(runs or [])
        self.status = status
        self.note = note
        self.tint = tint
        self.message_id = message_id
        self.error = error  # why a failed answer failed, said in its header
        self.waiting = ""  # what the answer waits on before its first token, said in the header until it comes
        self._stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        yield Label(self._header(), classes="message-header")
        if self.role == "user":
            yield Static(Text(self.text), classes="message-body")
        else:
            yield Markdown(self.text, classes="message-body")
            yield Static(tinted(self.text, self.runs), classes="message-tint")

    def on_mount(self) -> None:
        self._apply_tint()

    def _header(self) -> str:
        who = "You" if self.role == "user" else "Assistant"
        waiting = f" · {self.waiting}…" if self.waiting else ""
        why = f": {self.error}" if self.status == "error" and self.error else ""
        return f"{who}{STATUS_NOTES.get(self.status, '')}{why}{waiting}{(' · ' + self.note) if self.note else ''}"

    def set_waiting(self, stage: str) -> None:
        self.waiting = stage
        self.query_one(".message-header", Label).update(self._header())

    def _apply_tint(self) -> None:
        if self.role == "assistant":
            self.query_one(Markdown).display = not self.tint
            self.query_one(".message-tint", Static).display = self.tint

    def set_tint(self, tint: bool) -> None:
        self.tint = tint
        if self.role == "assistant":
            self.query_one(".message-tint", Static).update(tinted(self.text, self.runs))
            self._apply_tint()

    def start_stream(self) -> None:
        self._stream = Markdown.get_stream(self.query_one(Markdown))

    async def append(self, pieces: list[tuple[str, str]]) -> None:
        fragment = "".join(text for _, text in pieces)
        if self.waiting and fragment:
            self.set_waiting("")
        for source, text in pieces:
            if self.runs and self.runs[-1][0] == source:
                self.runs[-1] = (source, self.runs[-1][1] + len(text))
            else:
                self.runs.append((source, len(text)))
        self.text += fragment
        if self.tint:
            self.query_one(".message-tint", Static).update(tinted(self.text, self.runs))
        elif self._stream is not None and fragment:
            await self._stream.write(fragment)

    async def finish(self, text: str, runs: list[tuple[str, int]], status: str, note: str, error: str | None = None) -> None:
        """Close the stream and render the whole answer once more, so code blocks are whole."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.text, self.runs, self.status, self.note, self.waiting, self.error = text, list(runs), status, note, "", error
        await self.query_one(Markdown).update(text)
        self.query_one(".message-tint", Static).update(tinted(text, self.runs))
        self.query_one(".message-header", Label).update(self._header())

    def set_status(self, status: str, note: str = "", error: str | None = None) -> None:
        self.status, self.note, self.waiting, self.error = status, note, "", error
        self.query_one(".message-header", Label).update(self._header())
