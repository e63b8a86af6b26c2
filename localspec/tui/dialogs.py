"""Small modal dialogs: confirm, edit a line or a text, and the help screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Markdown, TextArea


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel"), Binding("y", "dismiss(True)", "Yes", show=False)]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button(self.yes, variant="error", id="yes")
                yield Button("Cancel", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TextDialog(ModalScreen["str | None"]):
    """One line (a title) or a multi-line text (a system prompt); Escape keeps the old value."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, title: str, value: str, multiline: bool = False) -> None:
        super().__init__()
        self.title_text, self.value, self.multiline = title, value, multiline

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text)
            if self.multiline:
                yield TextArea(self.value, id="value", classes="dialog-text")
            else:
                yield Input(self.value, id="value")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#value").focus()

    def on_input_submitted(self) -> None:
        self.action_save()

    def action_save(self) -> None:
        widget = self.query_one("#value")
        self.dismiss(widget.text if isinstance(widget, TextArea) else self.query_one("#value", Input).value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)


# The keys first: on a short terminal (50x15) the help showed only its introduction, the keys below the fold.
HELP = """\
| key | does |
|---|---|
| Enter | send the prompt |
| Ctrl+J | a new line in the prompt |
| Esc | stop the answer (what was written is kept, marked *stopped*) |
| Ctrl+N | new conversation |
| Ctrl+R | regenerate the last answer |
| Ctrl+T | tint accepted draft tokens on/off |
| F5 | copy the last answer |
| F4 | edit this conversation's system prompt |
| Ctrl+B | show/hide the conversations |
| F2 | models: download, check, pick a pair |
| F3 | settings |
| Ctrl+P | all commands (rename, delete, copy a code block...) |
| Ctrl+Q | quit |

**localspec** chats with a local model pair: a small **draft** model proposes tokens, the large
**target** model checks them in one pass. The output is the target's own.

**The panel.** *auto chose*: under auto, its steps and the tokens they made by source (plain, lookup,
the draft model...). *accepted*: draft tokens the target confirmed, for this answer and this chat.
*tok/pass*: tokens emitted per target pass (plain decoding is 1). *accepted by draft position*: how
often the draft's 1st, 2nd... token (*pos 1*, *pos 2*...) survives, among the drafts that reached it
(past 8 positions, one character each: ▁ none, █ all). *vs plain*: this answer's rate over the
target's own plain rate, timed on this machine. Where the terminal is too narrow for the panel
beside the chat, its chief numbers fold into one line under it.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("f1", "dismiss", "Close", show=False)]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            with VerticalScroll(id="help-text"):  # focused: the arrows and Page Up/Down scroll it on a small terminal
                yield Markdown(HELP)
            yield Button("Close", id="close")

    def on_mount(self) -> None:
        self.query_one("#help-text").focus()

    def on_button_pressed(self) -> None:
        self.dismiss()
